"""The rolling switch's decisions (can_roll, pure) and the order of its steps, with a fake router
that enforces "never empty" and records calls (the real proof under load is
tests/testbed_tests/test_rolling.py); the drain signal parsed from SGLang 0.5.23's own /metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sparkctl.clients.router import RouterError, Worker
from sparkctl.lifecycle import rolling
from sparkctl.lifecycle.drain import count_in_flight, wait_drained
from sparkctl.lifecycle.rolling import RollError, can_roll, layout_blocker, running_mode
from sparkctl.lifecycle.steps import QuietReporter
from sparkctl.planning.build import build_plan
from sparkctl.profile.load import load_profile_text
from sparkctl.runtime.readiness import EndpointHealth
from tests.unit.lifecycle.test_reconcile_groups import running

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "sglang"


@pytest.fixture(autouse=True)
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("SPARKCTL_API_KEY", "sk-router-secret-value")


def profile(env: dict | None = None, **router: object):
    doc = yaml.safe_load((ROOT / "profiles" / "dual-spark.yaml").read_text())
    doc["modes"]["dp2b"] = {**doc["modes"]["dp2"], "env": {"ROLL_MARK": "b", **(env or {})}}
    doc["router"] = {**doc.get("router", {}), **router}
    return load_profile_text(yaml.safe_dump(doc), "dual.yaml")


def containers(plan, status: str = "running") -> list:
    return [*(running(s, status) for s in plan.ranks), running(plan.router)]


def listing(plan, healthy: tuple[bool, ...] = (True, True)) -> list[Worker]:
    return [Worker(f"id{g.index}", g.worker_url, ok, 0) for g, ok in zip(plan.groups, healthy, strict=True)]


# ------------------------------------------------------------------------------------ can_roll
def test_same_layout_behind_the_same_router_rolls_every_replica() -> None:
    prof = profile()
    old, new = build_plan(prof, "dp2"), build_plan(prof, "dp2b")
    verdict = can_roll(old, new, containers(old), listing(old))
    assert verdict.ok and verdict.order == [0, 1] and verdict.skip == [] and verdict.reason == ""


@pytest.mark.parametrize(
    ("old_mode", "new_mode", "reason"),
    [
        ("dp2", "solo", "mode solo has 1 replica: a rolling switch needs 2 or more on both sides"),
        ("solo", "dp2", "mode solo has 1 replica"),
    ],
)
def test_layouts_that_cannot_roll_say_why(old_mode: str, new_mode: str, reason: str) -> None:
    prof = profile()
    old, new = build_plan(prof, old_mode), build_plan(prof, new_mode)
    verdict = can_roll(old, new, containers(old) if old.router else [], listing(new) if new.router else [])
    assert not verdict.ok and reason in verdict.reason


def test_replicas_must_stay_on_their_nodes_and_keep_their_count() -> None:
    doc = yaml.safe_load((ROOT / "profiles" / "quad-spark.yaml").read_text())
    doc["modes"]["front"] = {"nodes": ["spark1", "spark2"], "tp": 1, "replicas": 2}
    doc["modes"]["back"] = {"nodes": ["spark3", "spark4"], "tp": 1, "replicas": 2}
    prof = load_profile_text(yaml.safe_dump(doc), "quad.yaml")
    plans = {m: build_plan(prof, m) for m in ("front", "back", "dp4", "tp2x2")}
    assert layout_blocker(plans["front"], plans["back"]) == "replica 0 moves from spark1 to spark3"
    assert layout_blocker(plans["dp4"], plans["tp2x2"]) == "the replica count changes (4 -> 2)"


def test_a_router_whose_settings_change_must_restart_so_nothing_rolls() -> None:
    old = build_plan(profile(), "dp2")
    new = build_plan(profile(policy="round_robin"), "dp2b")
    assert "router's own settings change" in (layout_blocker(old, new) or "")
    assert not can_roll(old, new, containers(old), listing(old)).ok


def test_a_new_image_ref_rolls_and_keeps_the_router_unless_router_image_is_set() -> None:
    def with_image(ref: str, router_image: str | None = None):
        doc = yaml.safe_load((ROOT / "profiles" / "dual-spark.yaml").read_text())
        doc["image"] = {"ref": ref}
        if router_image:
            doc["router"] = {**doc.get("router", {}), "image": router_image}
        return build_plan(load_profile_text(yaml.safe_dump(doc), "dual.yaml"), "dp2")

    old, new = with_image("sglang:v1"), with_image("sglang:v2")
    assert old.config_hash != new.config_hash and new.router is not None and old.router is not None
    assert new.router.image == "sglang:v2"  # a router started from now on uses the new image
    assert new.router.labels == old.router.labels  # the running one is kept: same config hash
    assert can_roll(old, new, containers(old), listing(old)).ok
    pinned_old, pinned_new = with_image("sglang:v1", "router:1"), with_image("sglang:v1", "router:2")
    assert "router's own settings change" in (layout_blocker(pinned_old, pinned_new) or "")


def test_the_router_must_run_answer_and_serve() -> None:
    prof = profile()
    old, new = build_plan(prof, "dp2"), build_plan(prof, "dp2b")
    ranks = [running(s) for s in old.ranks]
    assert "router is not running on spark1" in can_roll(old, new, ranks, listing(old)).reason
    stopped = [*ranks, running(old.router, "exited")]
    assert "router is not running" in can_roll(old, new, stopped, listing(old)).reason
    other = [*ranks, running(old.router, **{"sparkctl.config_hash": "0" * 12})]
    assert "running router has other settings" in can_roll(old, new, other, listing(old)).reason
    assert "does not answer" in can_roll(old, new, containers(old), None).reason
    sick = can_roll(old, new, containers(old), listing(old, (False, False)))
    assert not sick.ok and "no healthy replica" in sick.reason
    assert "no single mode" in can_roll(None, new, containers(old), listing(old)).reason


def test_a_half_done_roll_continues_and_replicas_that_serve_nothing_go_first() -> None:
    prof = profile()
    old, new = build_plan(prof, "dp2"), build_plan(prof, "dp2b")
    mixed = [running(new.ranks[0]), running(old.ranks[1]), running(new.router)]
    assert running_mode(mixed, "dp2b") == "dp2"
    verdict = can_roll(old, new, mixed, listing(new))
    assert verdict.ok and verdict.skip == [0] and verdict.order == [1]
    done = can_roll(new, new, containers(new), listing(new))  # nothing left to replace
    assert not done.ok and done.reason == "every replica already runs the new config and serves"
    # replica 1 unhealthy in the router: replaced first (no capacity lost), then replica 0
    verdict = can_roll(old, new, containers(old), listing(old, (True, False)))
    assert verdict.order == [1, 0]


def test_running_mode() -> None:
    prof = profile()
    old, new = build_plan(prof, "dp2"), build_plan(prof, "dp2b")
    assert running_mode(containers(old), "dp2b") == "dp2"
    assert running_mode(containers(new), "dp2b") == "dp2b"  # an upgrade of the running mode
    assert running_mode(containers(old, "exited"), "dp2b") is None
    solo = build_plan(prof, "solo")
    assert running_mode([*containers(old), running(solo.ranks[0])], "dp2b") is None  # two others


# ------------------------------------------------------------------------------------ drain
def test_in_flight_is_sglang_http_requests_active_without_probes() -> None:
    text = (FIXTURES / "metrics-0.5.23-a.txt").read_text()
    assert count_in_flight(text) == 8  # /v1/chat/completions in SGLang's own exposition
    scrape = '# TYPE sglang:http_requests_active gauge\nsglang:http_requests_active{endpoint="/metrics",method="GET"} 1.0\n'
    assert count_in_flight(scrape) == 0  # the scrape counts itself: not a request to wait for
    assert count_in_flight("# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 3.0\n") is None
    assert count_in_flight("not prometheus {{") is None


def test_wait_drained_wants_two_zeros_in_a_row_and_stops_at_the_deadline() -> None:
    now = [0.0]
    reads = iter([3, 0, 1, 0, 0, 5])
    drained = wait_drained(
        lambda: next(reads), 10, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s)
    )
    assert drained == (True, 0) and next(reads) == 5  # 3, 0, 1, 0, 0: the lone 0 did not count
    now[0] = 0.0
    assert wait_drained(
        lambda: 2, 1.0, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s)
    ) == (False, 2)


def test_wait_drained_stops_waiting_for_a_replica_that_no_longer_answers() -> None:
    from sparkctl.lifecycle.drain import NoInFlightSignal

    now, reads = [0.0], [0]

    def gone() -> int:
        reads[0] += 1
        raise NoInFlightSignal("refused")

    tick = {"clock": lambda: now[0], "sleep": lambda s: now.__setitem__(0, now[0] + s)}
    assert wait_drained(gone, 120, **tick) == (False, -1)
    assert reads[0] == 5 and now[0] < 2  # five failed reads in a row, not the 120 s timeout


# ------------------------------------------------------------------------------------ the steps
class FakeRouter:
    """The router's worker API as a dict; refuses to be emptied, records every call."""

    def __init__(self, urls: list[str], calls: list) -> None:
        self.healthy = dict.fromkeys(urls, True)
        self.calls = calls

    def workers(self) -> list[Worker]:
        return [Worker(u, u, ok, 0) for u, ok in self.healthy.items()]

    def find(self, url: str) -> Worker | None:
        return next((w for w in self.workers() if w.url == url), None)

    def remove(self, url: str) -> bool:
        assert any(ok for u, ok in self.healthy.items() if u != url), "the router would be left empty"
        self.calls.append(("router.remove", url))
        return self.healthy.pop(url, None) is not None

    def add(self, url: str) -> None:
        self.calls.append(("router.add", url))
        self.healthy[url] = True

    def wait_for(self, what: str, predicate, *, timeout: float, interval: float = 0.1) -> list[Worker]:
        if not predicate(self.workers()):
            raise RouterError(f"router: {what} not seen")
        return self.workers()


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch):
    """Patch the I/O under roll_if_possible: containers observed, router, drain, stop, start."""

    def make(observed: list, prof=None, fail_start: set | None = None, new_mode: str = "dp2b"):
        prof = prof or profile()
        new = build_plan(prof, new_mode)
        calls: list = []
        router = FakeRouter([g.worker_url for g in new.groups], calls)
        # per replica: the check before the roll, at its removal, then until idle
        flights = {g.worker_url: iter([5, 2 + g.index, 1, 0, 0]) for g in new.groups}

        def start_group(profile, pool, plan, deadline, budget, rep):
            calls.append(("start", plan.mode, plan.groups[0].index))
            if (plan.mode, plan.groups[0].index) in (fail_start or set()):
                raise RuntimeError("rank exited")

        monkeypatch.setattr(rolling, "observe", lambda pool, cluster, nodes: observed)
        monkeypatch.setattr(rolling.routers, "client", lambda pool, plan: router)
        monkeypatch.setattr(
            rolling,
            "in_flight",
            lambda url, key=None, names=None: (calls.append(("drain", url)), next(flights[url]))[1],
        )
        monkeypatch.setattr(
            rolling,
            "remove_all",
            lambda pool, infos, grace: calls.append(("stop", sorted(c.name for c in infos))),
        )
        monkeypatch.setattr(rolling, "start_group", start_group)
        monkeypatch.setattr(rolling, "probe", lambda ep: EndpointHealth())
        return prof, new, router, calls

    return make


def test_each_replica_leaves_the_router_drains_stops_starts_and_returns_before_the_next(harness) -> None:
    old = build_plan(profile(), "dp2")
    prof, new, router, calls = harness(containers(old))
    result = rolling.roll_if_possible(prof, None, new, 60, QuietReporter())  # type: ignore[arg-type]
    assert result is not None and result.action == "rolled"
    steps = [c for c in calls if c[0] != "drain"]
    expected = []
    for i, g in enumerate(new.groups):
        expected += [
            ("router.remove", g.worker_url),
            ("stop", [old.ranks[i].container_name]),
            ("start", "dp2b", i),
            ("router.add", g.worker_url),
        ]
    assert steps == expected
    # the drain polled the removed replica, between its removal and its stop, until it was idle
    url0 = new.groups[0].worker_url
    removed, stopped = (
        calls.index(("router.remove", url0)),
        calls.index(("stop", [old.ranks[0].container_name])),
    )
    assert calls[removed + 1 : stopped] == [("drain", url0)] * 4  # 2 in flight, 1, then idle twice
    assert [(r.action, r.old["mode"], r.new["mode"], r.in_flight) for r in result.replicas] == [
        ("rolled", "dp2", "dp2b", 2),
        ("rolled", "dp2", "dp2b", 3),
    ]
    assert set(router.healthy) == {g.worker_url for g in new.groups}


def test_a_replica_that_fails_to_start_gets_its_old_config_back_and_the_rest_keep_serving(harness) -> None:
    old = build_plan(profile(), "dp2")
    prof, new, router, calls = harness(containers(old), fail_start={("dp2b", 1)})
    with pytest.raises(RollError) as err:
        rolling.roll_if_possible(prof, None, new, 60, QuietReporter())  # type: ignore[arg-type]
    msg = str(err.value)
    assert f"replica 0 runs dp2b (config {new.config_hash})" in msg
    assert f"replica 1 runs dp2 (config {old.config_hash})" in msg and "rank exited" in msg
    assert "rerun the same command" in msg and "sparkctl switch dp2" in msg
    assert calls[-2:] == [("start", "dp2", 1), ("router.add", new.groups[1].worker_url)]
    assert all(router.healthy.values()) and len(router.healthy) == 2


def test_an_upgrade_that_fails_leaves_the_replica_out_and_says_so(harness) -> None:
    # The running containers carry a config the profile no longer describes: nothing to restore.
    stale = build_plan(profile(env={"OLD": "1"}), "dp2b")
    prof, new, router, calls = harness(containers(stale), fail_start={("dp2b", 0)})
    with pytest.raises(RollError) as err:
        rolling.roll_if_possible(prof, None, new, 60, QuietReporter())  # type: ignore[arg-type]
    assert "replica 0 runs nothing, not in the router" in str(err.value)
    assert f"replica 1 runs dp2b (config {stale.config_hash})" in str(err.value)
    assert list(router.healthy) == [new.groups[1].worker_url]  # the old replica 1 still serves
    assert ("start", "dp2b", 1) not in calls


def test_ctrl_c_while_draining_puts_the_replica_back(harness, monkeypatch: pytest.MonkeyPatch) -> None:
    old = build_plan(profile(), "dp2")
    prof, new, router, calls = harness(containers(old))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(rolling, "wait_drained", interrupted)
    with pytest.raises(KeyboardInterrupt):
        rolling.roll_if_possible(prof, None, new, 60, QuietReporter())  # type: ignore[arg-type]
    assert calls[-1] == ("router.add", new.groups[0].worker_url)
    assert not any(c[0] in ("stop", "start") for c in calls)
    assert set(router.healthy) == {g.worker_url for g in new.groups}


def test_a_switch_from_or_to_one_replica_is_not_rolled(harness) -> None:
    prof = profile()
    solo = build_plan(prof, "solo")
    _, new, _, calls = harness([running(solo.ranks[0])])
    said: list[str] = []

    class Rep(QuietReporter):
        def phase(self, text: str) -> None:
            said.append(text)

    assert rolling.roll_if_possible(prof, None, new, 60, Rep()) is None  # type: ignore[arg-type]
    assert said == [
        "not rolling: mode solo has 1 replica: a rolling switch needs 2 or more on both sides; "
        "stopping all replicas, then starting the new ones"
    ]
    assert calls == []


def test_the_cli_shows_each_replicas_roll_and_json_lists_old_and_new(harness) -> None:
    import io

    from rich.console import Console

    from sparkctl.commands.up_output import print_rolled

    old = build_plan(profile(), "dp2")
    prof, new, _, _ = harness(containers(old))
    result = rolling.roll_if_possible(prof, None, new, 60, QuietReporter())  # type: ignore[arg-type]
    assert result is not None
    buf = io.StringIO()
    print_rolled(Console(file=buf, width=200, color_system=None), result, 12.5)
    text = buf.getvalue()
    assert f"rolled 2 of 2 replica(s) onto mode dp2b (config {new.config_hash}) in 12.5s" in text
    assert (
        f"replica 1 (spark2): dp2 {old.config_hash} -> dp2b {new.config_hash}: drained 3 request(s)" in text
    )
    rows = result.to_json()["rolling"]
    assert [(r["index"], r["old"]["config_hash"], r["new"]["config_hash"]) for r in rows] == [
        (0, old.config_hash, new.config_hash),
        (1, old.config_hash, new.config_hash),
    ]
    assert {"drain_s", "stop_s", "start_s", "total_s", "in_flight", "in_router", "url", "nodes"} <= set(
        rows[0]
    )


def test_a_replica_that_cannot_say_what_it_serves_is_not_rolled(
    harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sparkctl.lifecycle.drain import NoInFlightSignal

    old = build_plan(profile(), "dp2")
    prof, new, _, calls = harness(containers(old))

    def no_metrics(url: str, key: str | None = None, names=None) -> int:
        raise NoInFlightSignal(f"{url}/metrics: HTTP 404", fix="set engine.args enable-metrics: true")

    monkeypatch.setattr(rolling, "in_flight", no_metrics)
    said: list[str] = []

    class Rep(QuietReporter):
        def phase(self, text: str) -> None:
            said.append(text)

    assert rolling.roll_if_possible(prof, None, new, 60, Rep()) is None  # type: ignore[arg-type]
    assert said and said[0].startswith("not rolling: replica 0 cannot be drained (")
    assert "/metrics: HTTP 404; fix: set engine.args enable-metrics: true" in said[0]
    assert calls == []


def test_a_tp_group_is_one_replica_its_ranks_stop_and_start_together(harness) -> None:
    doc = yaml.safe_load((ROOT / "profiles" / "quad-spark.yaml").read_text())
    doc["modes"]["tp2x2b"] = {**doc["modes"]["tp2x2"], "env": {"ROLL_MARK": "b"}, "default": False}
    prof = load_profile_text(yaml.safe_dump(doc), "quad.yaml")
    old = build_plan(prof, "tp2x2")
    _, new, _, calls = harness(containers(old), prof=prof, new_mode="tp2x2b")
    result = rolling.roll_if_possible(prof, None, new, 60, QuietReporter())  # type: ignore[arg-type]
    assert result is not None and [r.nodes for r in result.replicas] == [
        ["spark1", "spark2"],
        ["spark3", "spark4"],
    ]
    stops = [c[1] for c in calls if c[0] == "stop"]
    assert stops == [sorted(r.container_name for r in old.group_ranks(i)) for i in (0, 1)]
    assert [c for c in calls if c[0] == "start"] == [("start", "tp2x2b", 0), ("start", "tp2x2b", 1)]


def test_a_rolling_up_lists_the_containers_once(harness, monkeypatch: pytest.MonkeyPatch) -> None:
    old = build_plan(profile(), "dp2")
    prof, new, _router, _calls = harness(containers(old))
    monkeypatch.setattr(rolling, "observe", lambda *a: pytest.fail("listed again: up passes what it listed"))
    result = rolling.roll_if_possible(prof, None, new, 60, QuietReporter(), containers(old))  # type: ignore[arg-type]
    assert result is not None and result.action == "rolled"
