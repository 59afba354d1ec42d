"""The gated start's sequence (lifecycle/gated.py) against a stand-in engine that honours the gate:
its ranks rendezvous, block, and allocate only once the gate opened. Admission refused -> nothing
allocated and the error the start's rollback stops every rank on; admitted -> the ranks load."""

from __future__ import annotations

import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from sparkctl.connectors.base import RunResult
from sparkctl.lifecycle.gated import GATE_CALL, GateError, open_gates, parse_call
from sparkctl.lifecycle.memgate import AdmissionError
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_text

ROOT = Path(__file__).resolve().parents[3]


def gated_profile(**memory):
    data = yaml.safe_load((ROOT / "profiles" / "dual-spark.yaml").read_text())
    data.setdefault("memory", {}).update({"gated_start": True, **memory})
    return load_profile_text(yaml.safe_dump(data, sort_keys=False))


class StandIn:
    """Two ranks behind SGLang's gate: rank 0's /health answers once both joined the rendezvous
    (after `joins` polls); POST /gate/activate lets every rank allocate."""

    def __init__(self, joins: int = 2) -> None:
        self.joins, self.polls, self.activated, self.calls = joins, 0, False, []

    @property
    def allocated(self) -> bool:
        return self.activated  # the ranks size their pools only after the gate

    def run(self, node: str, argv: list[str]) -> RunResult:
        url, method = argv[-2], argv[-1]
        self.calls.append((node, method, url))
        if method == "GET" and url == "http://127.0.0.1:50058/health":
            self.polls += 1
            out = '{"status": 200}' if self.polls > self.joins else '{"error": "Connection refused"}'
        elif method == "POST" and url == "http://127.0.0.1:50058/gate/activate":
            self.activated = True
            out = '{"status": 200}'
        else:
            out = '{"status": 404}'
        return RunResult(node, tuple(argv), 0, out + "\n", "")


class Pool:
    def __init__(self, engine: StandIn) -> None:
        self.engine = engine

    def get(self, node: str):
        engine = self.engine

        class Conn:
            def run(self, argv, timeout=None, input=None):
                return engine.run(node, list(argv))

        return Conn()


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def run_gates(profile, engine: StandIn, admit, deadline: float = 60.0) -> list[str]:
    said: list[str] = []
    clock = Clock()
    plan = build_plan(profile, "tp2")
    open_gates(
        profile, Pool(engine), plan, deadline, said.append, admit=admit, clock=clock, sleep=clock.sleep
    )
    return said


def test_admitted_at_the_gate_then_opened_and_the_ranks_load() -> None:
    engine, admitted = StandIn(joins=2), []

    def admit(profile, pool, plan, nodes):
        assert engine.polls == 3 and not engine.allocated  # every rank waits at the gate, nothing loaded
        admitted.append((plan.mode, [r.node for r in plan.ranks], nodes))

    said = run_gates(gated_profile(), engine, admit)
    assert admitted == [("tp2", ["spark1", "spark2"], ["spark1", "spark2"])]
    assert engine.allocated
    assert [c[0] for c in engine.calls] == ["spark1"] * 4  # asked from rank 0's node (loopback)
    assert said == [
        "replica 0: every rank waits at the launch gate (2s); admission on spark1, spark2",
        "replica 0: launch gate opened on spark1: the ranks load",
    ]


def test_refused_at_the_gate_nothing_allocated_and_the_rollback_stops_every_rank() -> None:
    engine = StandIn(joins=0)

    def admit(profile, pool, plan, nodes):
        raise AdmissionError(
            "spark2: the start needs 110.0 GiB, 96.0 GiB can be had", node="spark2", fix="lower it"
        )

    running = {"spark1": True, "spark2": True}
    with pytest.raises(AdmissionError) as err:
        try:
            run_gates(gated_profile(), engine, admit)
        except BaseException:
            running = dict.fromkeys(running, False)  # start_group: remove_started kills every rank
            raise
    assert not engine.allocated and not any(m == "POST" for _, m, _ in engine.calls)
    assert running == {"spark1": False, "spark2": False}
    assert err.value.node == "spark2" and err.value.fix == "lower it"
    assert (
        "refused at the launch gate" in err.value.message
        and "none had allocated GPU memory" in err.value.message
    )


def test_a_rank_that_never_joins_is_a_gate_error_at_the_deadline() -> None:
    engine = StandIn(joins=10**6)
    with pytest.raises(GateError) as err:
        run_gates(gated_profile(), engine, lambda *a: None, deadline=5.0)
    assert err.value.node == "spark1" and "did not answer within 5s" in err.value.message
    assert "Gated launch waiting for activation." in (err.value.fix or "")
    assert "could not bind 127.0.0.1:50058" in (err.value.fix or "")  # every rank waits, the gate never bound
    assert not engine.allocated


def test_a_rank_that_exits_while_the_group_waits_ends_the_wait_at_once() -> None:
    engine, polls = StandIn(joins=10**6), []

    def dead() -> str | None:
        polls.append(1)
        return "rank 1 on spark2 exited (code 1)" if len(polls) >= 3 else None

    clock = Clock()
    plan = build_plan(gated_profile(), "tp2")
    with pytest.raises(GateError) as err:
        open_gates(
            gated_profile(), Pool(engine), plan, 600.0, print, clock=clock, sleep=clock.sleep, dead=dead
        )
    assert "rank 1 on spark2 exited (code 1) before the group reached the launch gate" in err.value.message
    assert clock.t == 2.0 and not engine.allocated  # not the 600 s deadline


def test_exited_rank_names_the_first_rank_whose_container_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from sparkctl.lifecycle.gated import exited_rank
    from sparkctl.runtime import containers

    plan = build_plan(gated_profile(), "tp2")
    states = {plan.ranks[0].container_name: "running", plan.ranks[1].container_name: "running"}
    monkeypatch.setattr(
        containers,
        "inspect",
        lambda conn, name: SimpleNamespace(status=states[name], exit_code=1) if name in states else None,
    )
    dead = exited_rank(Pool(StandIn()), plan.ranks)
    assert dead() is None
    states[plan.ranks[1].container_name] = "exited"
    assert dead() == f"rank 1 on spark2 ({plan.ranks[1].container_name}) exited (code 1)"
    del states[plan.ranks[1].container_name]
    assert dead() == f"rank 1 on spark2 ({plan.ranks[1].container_name}) is gone"


def test_no_gate_no_call_and_without_unified_memory_the_gate_opens_without_admission() -> None:
    engine = StandIn()
    plain = yaml.safe_load((ROOT / "profiles" / "dual-spark.yaml").read_text())
    said = run_gates(load_profile_text(yaml.safe_dump(plain)), engine, lambda *a: pytest.fail("admitted"))
    assert engine.calls == [] and said == []
    engine = StandIn(joins=0)
    said = run_gates(gated_profile(unified=False), engine, lambda *a: pytest.fail("admitted"))
    assert engine.allocated and said[0] == "replica 0: every rank waits at the launch gate (0s)"


class _Gate(BaseHTTPRequestHandler):
    opened = False

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def do_POST(self) -> None:
        _Gate.opened = self.path == "/gate/activate"
        self.send_response(200 if _Gate.opened else 404)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_the_node_side_call_talks_http_to_a_real_server() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Gate)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:

        def call(path: str, method: str) -> int | None:
            res = subprocess.run(
                [sys.executable, "-S", "-c", GATE_CALL, base + path, method], capture_output=True, text=True
            )
            return parse_call(res.stdout)

        assert call("/health", "GET") == 200 and call("/nope", "GET") == 404
        assert call("/gate/activate", "POST") == 200 and _Gate.opened
    finally:
        server.shutdown()
    res = subprocess.run(
        [sys.executable, "-S", "-c", GATE_CALL, base + "/health", "GET"], capture_output=True, text=True
    )
    assert parse_call(res.stdout) is None  # nothing listens: not up yet
    assert parse_call("") is None and parse_call("junk") is None


def test_a_rolling_switchs_replica_is_admitted_on_its_own_ranks() -> None:
    """`rolling` starts `Plan.replica(1)` alone: its group keeps the full plan's rank indices
    ([2, 3]), so the gate must admit that sub-plan as it is, not cut it again."""
    data = yaml.safe_load((ROOT / "profiles" / "quad-spark.yaml").read_text())
    data.setdefault("memory", {})["gated_start"] = True
    profile = load_profile_text(yaml.safe_dump(data, sort_keys=False))
    sub = build_plan(profile, "tp2x2").replica(1)
    assert sub.groups[0].ranks == [2, 3] and sub.groups[0].gate is not None
    engine, admitted = StandIn(joins=0), []

    def admit(profile, pool, plan, nodes):
        admitted.append(([r.node for r in plan.ranks], nodes))

    clock = Clock()
    open_gates(profile, Pool(engine), sub, 60.0, print, admit=admit, clock=clock, sleep=clock.sleep)
    assert admitted == [(["spark3", "spark4"], ["spark3", "spark4"])] and engine.allocated
    assert {c[0] for c in engine.calls} == {"spark3"}
