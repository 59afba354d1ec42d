"""supervisor/on_demand.py: what the on-demand loop decides from the fleet gateway's view (start,
idle-stop, evict the least recently used, refuse), and the loop itself against a scripted gateway,
a fake clock and fake start/stop: one start, a failed start retried only after RETRY_S, its events,
the fleet's lock held around each verb, and its end on the flag."""

from __future__ import annotations

import types

import pytest

from sparkctl.clients.fleet import ServiceView
from sparkctl.errors import LockHeldError, SparkctlError
from sparkctl.lifecycle import state
from sparkctl.lifecycle.lock import ClusterLock
from sparkctl.lifecycle.supervisor import on_demand
from sparkctl.lifecycle.supervisor.on_demand import Action, decide, idle_s, make_room, run_fleet
from sparkctl.profile import load_profile_text

GB10 = "{name: NVIDIA GB10, memory_gib: 128, compute_capability: '12.1', unified_memory: true}"
T0 = 1_000_000.0  # the fake clock's start (a real epoch's size: "never failed" is 0.0)


def service(name: str, gib: int, on_demand: bool = False, idle_stop: str | None = None) -> str:
    extra = "    on_demand: true\n" if on_demand else ""
    extra += f"    idle_stop: {idle_stop}\n" if idle_stop else ""
    return f"""  {name}:
    image: {{ref: 'img:1'}}
    model: {{target: {{id: org/{name}}}}}
    engine: {{container: {{ipc: host}}}}
    memory_gib: {gib}
    modes: {{solo: {{nodes: [a]}}}}
{extra}"""


def fleet(*services: str):
    """A fleet on one GB10 node (capacity 128 - 4 = 124 GiB): the budgets are judged."""
    head = f"cluster: c\nnodes:\n  - {{name: a, address: local, gpu: {GB10}}}\nmodels:\n"
    return load_profile_text(head + "".join(services))


def view(name: str, loaded: bool = False, waiting: int = 0, age: float | None = None) -> ServiceView:
    return ServiceView(name, loaded, waiting, 0, age, True)


# ---- decide (pure) ----


def test_a_waiting_request_for_a_stopped_on_demand_service_starts_it() -> None:
    prof = fleet(service("chat", 40), service("coder", 40, on_demand=True))
    acts = decide(prof, {"coder": view("coder", waiting=2)}, {}, T0)
    assert acts == [Action("start", "coder", "2 request(s) wait")]


def test_a_loaded_service_with_waiting_requests_is_not_started_again() -> None:
    prof = fleet(service("coder", 40, on_demand=True))
    assert decide(prof, {"coder": view("coder", loaded=True, waiting=1, age=0.0)}, {}, T0) == []


def test_a_service_not_on_demand_is_never_started_nor_stopped() -> None:
    prof = fleet(service("chat", 40), service("coder", 40, on_demand=True))
    seen = {"chat": view("chat", waiting=3), "coder": view("coder", loaded=True, age=10_000.0)}
    assert decide(prof, seen, {}, T0) == []  # coder: on demand but no idle_stop: stays


def test_a_service_the_gateway_does_not_list_is_left_alone() -> None:
    prof = fleet(service("coder", 40, on_demand=True, idle_stop="90s"))
    assert decide(prof, {}, {}, T0) == []


def test_a_loaded_on_demand_service_idle_for_idle_stop_is_stopped() -> None:
    prof = fleet(service("coder", 40, on_demand=True, idle_stop="90s"))
    assert decide(prof, {"coder": view("coder", loaded=True, age=89.0)}, {}, T0) == []
    acts = decide(prof, {"coder": view("coder", loaded=True, age=90.0)}, {}, T0)
    assert acts == [Action("stop", "coder", "no request for 90 s (idle_stop 90 s)")]


def test_without_a_request_yet_idle_counts_from_the_loops_start() -> None:
    prof = fleet(service("coder", 40, on_demand=True, idle_stop="1m"))
    seen = {"coder": view("coder", loaded=True)}  # no request since the gateway started
    assert decide(prof, seen, {}, T0) == []  # not started by this loop: not judged idle
    assert decide(prof, seen, {"coder": T0 - 59}, T0) == []
    assert [a.verb for a in decide(prof, seen, {"coder": T0 - 60}, T0)] == ["stop"]


def test_idle_seconds_are_the_last_requests_age_else_since_the_start() -> None:
    assert idle_s(view("x", age=5.0), T0 - 100, T0) == 5.0
    assert idle_s(view("x"), T0 - 100, T0) == 100.0
    assert idle_s(view("x"), None, T0) == 0.0


def test_no_room_evicts_the_idle_on_demand_service_first() -> None:
    prof = fleet(service("chat", 40), service("x", 60, on_demand=True), service("y", 60, on_demand=True))
    seen = {"chat": view("chat", loaded=True), "x": view("x", waiting=1), "y": view("y", True, age=30.0)}
    assert decide(prof, seen, {}, T0) == [Action("start", "x", "1 request(s) wait", ("y",))]


def test_room_enough_evicts_nothing() -> None:
    prof = fleet(service("chat", 40), service("x", 40, on_demand=True), service("y", 40, on_demand=True))
    seen = {"chat": view("chat", loaded=True), "x": view("x", waiting=1), "y": view("y", True, age=30.0)}
    assert decide(prof, seen, {}, T0) == [Action("start", "x", "1 request(s) wait")]


@pytest.mark.parametrize(("ages", "first"), [({"a": 500.0, "b": 10.0}, "a"), ({"a": 10.0, "b": 500.0}, "b")])
def test_the_least_recently_used_is_evicted_and_only_as_many_as_needed(ages, first) -> None:
    prof = fleet(*(service(n, 50, on_demand=True) for n in "abc"))  # two fit in 124 GiB, not three
    seen = {n: view(n, True, age=age) for n, age in ages.items()} | {"c": view("c", waiting=1)}
    assert make_room(prof, "c", {"a", "b"}, seen) == [first]


def test_evicting_goes_on_until_the_service_fits() -> None:
    prof = fleet(*(service(n, 40, on_demand=True) for n in "abc"), service("big", 100, on_demand=True))
    seen = {"a": view("a", True, age=5.0), "b": view("b", True, age=50.0), "c": view("c", True, age=20.0)}
    assert make_room(prof, "big", {"a", "b", "c"}, seen | {"big": view("big", waiting=1)}) == ["b", "c", "a"]


def test_a_service_with_its_own_waiting_requests_is_never_evicted() -> None:
    prof = fleet(*(service(n, 50, on_demand=True) for n in "abc"))
    seen = {"a": view("a", True, waiting=1, age=500.0), "b": view("b", True, age=10.0)}
    assert make_room(prof, "c", {"a", "b"}, seen | {"c": view("c", waiting=1)}) == ["b"]


def test_when_only_a_pinned_service_would_have_to_go_the_start_is_refused() -> None:
    prof = fleet(service("chat", 100), service("x", 60, on_demand=True))
    seen = {"chat": view("chat", loaded=True), "x": view("x", waiting=1)}
    assert make_room(prof, "x", {"chat"}, seen) is None
    assert decide(prof, seen, {}, T0) == [Action("refuse", "x", "1 request(s) wait; no room on its nodes")]


def test_a_pinned_service_not_loaded_takes_no_room() -> None:
    prof = fleet(service("chat", 100), service("x", 60, on_demand=True))
    assert decide(prof, {"x": view("x", waiting=1)}, {}, T0) == [Action("start", "x", "1 request(s) wait")]


# ---- run_fleet (the loop) ----


class Flag:
    """StopFlag's face: set after `polls` naps; each nap moves the fake clock on."""

    def __init__(self, clock: list[float], polls: int) -> None:
        self.clock, self.left, self.naps = clock, polls, 0

    @property
    def set(self) -> bool:
        return self.left <= 0

    def nap(self, seconds: float) -> bool:
        self.naps += 1
        self.left -= 1
        self.clock[0] += seconds
        return self.set


@pytest.fixture
def loop(tmp_path, monkeypatch):
    """run(profile, script, polls, start=..., stop=...) -> (calls, said, flag). `script`: one
    gateway answer per poll (a dict of views, or a SparkctlError to raise); the last one repeats."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    clock = [T0]
    monkeypatch.setattr(on_demand, "time", types.SimpleNamespace(time=lambda: clock[0]))

    def run(profile, script, polls, start=None, stop=None):
        calls, said, asked = [], [], []

        def state_of(url, key):
            asked.append((url, key))
            answer = script[min(len(asked), len(script)) - 1]
            if isinstance(answer, Exception):
                raise answer
            return answer

        monkeypatch.setattr(on_demand, "fleet_state", state_of)

        def verb(name):
            def call(service):
                calls.append((name, service, clock[0]))
                fn = start if name == "start" else stop
                if fn:
                    fn(service)

            return call

        flag = Flag(clock, polls)
        rc = run_fleet(profile, flag, verb("start"), verb("stop"), "http://gw:8000", "sk-op", said.append)
        assert rc == 0
        assert set(asked) <= {("http://gw:8000", "sk-op")}  # the fleet's URL, the operator's key
        return calls, said, flag, len(asked)

    return run


def names(events: list[dict]) -> list[str]:
    return [e["event"] for e in events]


def test_the_loop_starts_a_waiting_service_once_and_records_it(loop) -> None:
    prof = fleet(service("coder", 40, on_demand=True))
    script = [{"coder": view("coder", waiting=1)}, {"coder": view("coder", loaded=True, age=0.0)}]
    calls, said, flag, polls = loop(prof, script, polls=4)
    assert calls == [("start", "coder", T0)]
    assert polls == 4 and flag.naps == 4  # one poll per nap, until the flag
    assert said == ["coder: start (1 request(s) wait)"]
    ev = state.events("c-coder")
    assert names(ev) == ["on-demand-start"] and ev[0]["why"] == "1 request(s) wait"


def test_a_set_flag_ends_the_loop_before_any_poll(loop) -> None:
    prof = fleet(service("coder", 40, on_demand=True))
    calls, said, flag, polls = loop(prof, [{"coder": view("coder", waiting=1)}], polls=0)
    assert (calls, said, flag.naps, polls) == ([], [], 0, 0)


def test_a_failed_start_is_retried_only_after_retry_s(loop, monkeypatch) -> None:
    monkeypatch.setattr(on_demand, "RETRY_S", 3.0)
    prof = fleet(service("coder", 40, on_demand=True))

    def start(name):
        raise SparkctlError("admission: no room on a")

    calls, said, _, _ = loop(prof, [{"coder": view("coder", waiting=1)}], polls=7, start=start)
    assert [t - T0 for _, _, t in calls] == [0.0, 3.0, 6.0]  # polls at 0..6 s; retried each 3 s
    assert said.count("coder: start failed: admission: no room on a") == 3
    ev = state.events("c-coder")
    assert names(ev) == ["on-demand-start-failed"] * 3 and ev[0]["why"] == "admission: no room on a"


def test_a_started_service_is_idle_stopped_counting_from_its_start(loop) -> None:
    prof = fleet(service("coder", 40, on_demand=True, idle_stop="10s"))
    script = [{"coder": view("coder", waiting=1)}, {"coder": view("coder", loaded=True)}]
    calls, said, _, _ = loop(prof, script, polls=12)
    assert calls == [("start", "coder", T0), ("stop", "coder", T0 + 10)]  # stopped: not judged again
    assert said[1] == "coder: stop (no request for 10 s (idle_stop 10 s))"
    assert names(state.events("c-coder")) == ["on-demand-start", "idle-stop"]


def test_an_eviction_stops_the_other_service_first_under_the_fleets_lock(loop) -> None:
    prof = fleet(service("x", 60, on_demand=True), service("y", 70, on_demand=True))
    script = [
        {"x": view("x", waiting=1), "y": view("y", True, age=40.0)},
        {"x": view("x", True, age=0.0), "y": view("y")},
    ]
    held = []

    def stop(name):
        try:
            ClusterLock(on_demand.fleet_lock_name(prof), "a by-hand up").acquire().release()
            held.append(False)
        except LockHeldError:
            held.append(True)

    calls, said, _, _ = loop(prof, script, polls=2, stop=stop)
    assert [(v, s) for v, s, _ in calls] == [("stop", "y"), ("start", "x")]
    assert held == [True]  # the fleet's lock was held while it stopped y
    assert said[0] == "y: stopping to make room for x"
    assert state.events("c-y")[0]["event"] == "evicted" and state.events("c-y")[0]["why"] == "room for x"
    assert names(state.events("c-x")) == ["on-demand-start"]


def test_a_fleet_lock_held_elsewhere_fails_the_start_without_calling_it(loop) -> None:
    prof = fleet(service("coder", 40, on_demand=True))
    with ClusterLock(on_demand.fleet_lock_name(prof), "sparkctl up chat"):
        calls, said, _, _ = loop(prof, [{"coder": view("coder", waiting=1)}], polls=1)
    assert calls == []
    assert said[0].startswith("coder: start failed: cluster 'c' is locked by another sparkctl")
    assert names(state.events("c-coder")) == ["on-demand-start-failed"]


def test_no_room_is_refused_and_said_without_a_start(loop) -> None:
    prof = fleet(service("chat", 100), service("x", 60, on_demand=True))
    script = [{"chat": view("chat", loaded=True), "x": view("x", waiting=2)}]
    calls, said, _, _ = loop(prof, script, polls=1)
    assert calls == []
    assert said == ["x: not started: 2 request(s) wait; no room on its nodes"]
    assert names(state.events("c-x")) == ["on-demand-refused"]


def test_an_unreachable_gateway_is_said_once_and_the_loop_goes_on(loop) -> None:
    prof = fleet(service("coder", 40, on_demand=True))
    down = SparkctlError("the fleet gateway at http://gw:8000 gave no state (connection refused)")
    script = [down, down, down, {"coder": view("coder", waiting=1)}]
    calls, said, _, polls = loop(prof, script, polls=4)
    assert polls == 4 and calls == [("start", "coder", T0 + 3)]
    assert said == [f"waiting for the fleet gateway: {down.message}", "coder: start (1 request(s) wait)"]


def test_a_refusal_is_said_and_recorded_once_per_retry_s_not_each_poll(loop, monkeypatch) -> None:
    monkeypatch.setattr(on_demand, "RETRY_S", 3.0)
    prof = fleet(service("chat", 100), service("x", 60, on_demand=True))
    script = [{"chat": view("chat", loaded=True), "x": view("x", waiting=2)}]
    calls, said, _, polls = loop(prof, script, polls=7)  # polls at 0..6 s
    assert calls == [] and polls == 7
    assert said == ["x: not started: 2 request(s) wait; no room on its nodes"] * 3
    assert names(state.events("c-x")) == ["on-demand-refused"] * 3  # at 0, 3 and 6 s
