"""The supervisor's start (lifecycle/supervisor/startup.py): a bounded, logged wait for the nodes
that never spins, the state file rebuilt from labels, what to bring back after a reboot."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.errors import ConnectError
from sparkctl.lifecycle import state
from sparkctl.lifecycle.supervisor import startup
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file
from sparkctl.runtime.containers import ContainerInfo

ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture(autouse=True)
def _state(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))


class Flag:
    """A StopFlag whose waits advance a fake clock (no real sleeping); set after `stop_after` waits."""

    def __init__(self, stop_after: int = 10_000) -> None:
        self.now, self.waits, self.stop_after = 0.0, [], stop_after

    def clock(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.now += seconds
        return len(self.waits) >= self.stop_after


def info(spec, status: str, mode: str = "tp2", config: str = "h1") -> ContainerInfo:
    labels = {"sparkctl.mode": mode, "sparkctl.rank": str(spec.rank), "sparkctl.config_hash": config}
    return ContainerInfo(
        spec.node, spec.container_name, "id", status, 0, False, None, None, "img", "sha", labels
    )


def plan():
    return build_plan(load_profile_file(ROOT / "profiles" / "dual-spark.yaml"), "tp2")


def lister(script: list[dict[str, bool]], found: list[ContainerInfo]):
    """containers.list_nodes answering per call from `script` ({node: reachable}), then all up."""
    calls = iter(script)

    def list_nodes(pool, cluster, nodes):
        up = next(calls, {})
        failed = {n: ConnectError("connection refused", node=n) for n in nodes if up.get(n) is False}
        return ([] if failed else found), failed

    return list_nodes


def test_a_node_that_comes_back_is_waited_for_with_backoff_and_logged(monkeypatch):
    p = plan()
    monkeypatch.setattr(startup.containers, "list_nodes", lister([{"spark2": False}] * 3, []))
    flag = Flag()
    assert startup.wait_for_nodes(None, "c1", ["spark1", "spark2"], flag, flag.clock) == []
    assert flag.waits == [1.0, 2.0, 4.0]
    kinds = [(e["event"], e.get("node")) for e in state.events("c1")]
    assert kinds == [("waiting_for_node", "spark2"), ("node_back", "spark2")]
    assert p.nodes == ["spark1", "spark2"]


def test_a_node_away_past_the_bound_is_said_once_and_retried_without_spinning(monkeypatch):
    monkeypatch.setattr(startup.containers, "list_nodes", lister([{"spark2": False}] * 1000, []))
    flag = Flag(stop_after=40)
    assert startup.wait_for_nodes(None, "c1", ["spark1", "spark2"], flag, flag.clock) is None
    events = [e["event"] for e in state.events("c1")]
    assert events.count("node_still_down") == 1 and events.count("waiting_for_node") == 1
    assert max(flag.waits) == startup.MAX_BACKOFF_S and min(flag.waits) >= 1.0
    assert flag.now > startup.NODE_BOUND_S
    down = next(e for e in state.events("c1") if e["event"] == "node_still_down")
    assert "node spark2 still away after" in state.describe_event(down)  # what `status` prints


def test_diff_brings_back_exited_or_gone_ranks_only_when_the_mode_was_there():
    p = plan()
    r0, r1 = p.ranks
    assert startup.diff(p, [info(r0, "running"), info(r1, "running")]) is None
    assert startup.diff(p, []) is None  # `down` removed it: nothing to bring back
    assert startup.diff(p, [info(r0, "exited", mode="solo")]) is None
    cause, seen = startup.diff(p, [info(r0, "exited"), info(r1, "exited")])
    assert cause == {"cause": "rank 0 on spark1 exited (exit code 0)", "rank": 0, "node": "spark1"}
    assert seen == "rank 0 exited, rank 1 exited"
    cause, seen = startup.diff(p, [info(r0, "running")])
    assert cause["cause"] == "rank 1 on spark2 disappeared" and seen == "rank 0 running, rank 1 gone"


def test_the_state_file_is_rebuilt_from_the_labels_when_missing():
    p = plan()
    startup.rebuild_state("c1", "tp2", [info(s, "exited", config="abc") for s in p.ranks])
    assert state.last_attempt("c1")["mode"] == "tp2" and state.last_attempt("c1")["config_hash"] == "abc"
    startup.rebuild_state("c1", "tp2", [info(s, "exited", config="zzz") for s in p.ranks])
    assert state.last_attempt("c1")["config_hash"] == "abc"  # an existing file is kept
    assert [e["event"] for e in state.events("c1")] == ["state_rebuilt"]


def test_begin_idles_while_nothing_of_the_mode_is_there_and_reconciles_once_it_is(monkeypatch):
    prof = load_profile_file(ROOT / "profiles" / "dual-spark.yaml")
    p = build_plan(prof, "tp2")
    exited = [info(s, "exited") for s in p.ranks]
    answers = iter([[], [], exited])
    monkeypatch.setattr(startup.containers, "list_nodes", lambda pool, c, n: (next(answers), {}))
    monkeypatch.setattr(startup, "resolve_plan", lambda prof, draft, pool: draft)
    flag = Flag()
    got_plan = startup.begin(prof, None, "tp2", flag)
    assert got_plan.mode == "tp2"
    assert state.events(prof.cluster)[-1]["cause"].startswith("rank 0 on spark1 exited")
    assert flag.waits == [startup.IDLE_POLL_S, startup.IDLE_POLL_S]
    events = [e["event"] for e in state.events(prof.cluster)]
    assert events == ["idle", "state_rebuilt", "reconciling"]
    said = state.describe_event(state.events(prof.cluster)[-1])
    assert "reconcile at start: rank 0 exited, rank 1 exited: restarting the group" in said


def test_begin_returns_none_when_stopped_while_idle(monkeypatch):
    prof = load_profile_file(ROOT / "profiles" / "dual-spark.yaml")
    monkeypatch.setattr(startup.containers, "list_nodes", lambda pool, c, n: ([], {}))
    assert startup.begin(prof, None, "tp2", Flag(stop_after=1)) is None
