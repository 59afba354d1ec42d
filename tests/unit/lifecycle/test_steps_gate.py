"""`start_group`'s gated start (lifecycle/gated.py wired in): every rank is started, the gate is
waited for, admitted and opened before readiness is polled; a refusal at the gate raises into the
start's rollback, which kills every rank it started (none has allocated GPU memory)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from sparkctl.lifecycle import gated, memgate, steps
from sparkctl.lifecycle.memgate import AdmissionError
from sparkctl.lifecycle.timeline import Timeline
from sparkctl.lifecycle.watch import WaitResult
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_text
from sparkctl.runtime import containers
from sparkctl.runtime.readiness import EndpointHealth

ROOT = Path(__file__).resolve().parents[3]
POOL = SimpleNamespace(get=lambda node: node)  # gated asks its gate from a node's connector


def dual_spark(gated_start: bool):
    data = yaml.safe_load((ROOT / "profiles" / "dual-spark.yaml").read_text())
    data.setdefault("memory", {})["gated_start"] = gated_start
    return load_profile_text(yaml.safe_dump(data, sort_keys=False))


class Said:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def phase(self, text: str) -> None:
        self.lines.append(text)

    def update(self, snapshot) -> None:  # noqa: ANN001
        pass


class Cluster:
    """What start_group's steps did, in order; the gate answers once both ranks run."""

    def __init__(self, refuse: str | None = None) -> None:
        self.events: list[str] = []
        self.running: set[str] = set()
        self.refuse = refuse
        self.exits: str | None = None  # a container that exited while the group waits at the gate

    def start(self, profile, pool, specs, started, sealed=None, tl=None) -> None:  # noqa: ANN001
        for s in specs:
            self.events.append(f"start rank {s.rank} on {s.node}")
            self.running.add(s.container_name)
            started.append(s)

    def remove(self, pool, plan, started):  # noqa: ANN001, ANN201
        for s in started:
            self.events.append(f"kill rank {s.rank} on {s.node}")
            self.running.discard(s.container_name)
        return [], []

    def gate_call(self, conn, url: str, method: str) -> int | None:  # noqa: ANN001
        self.events.append(f"{method} {url}")
        return 200 if len(self.running) == 2 and self.exits is None else None

    def admit(self, profile, pool, plan, nodes) -> None:  # noqa: ANN001
        self.events.append("admit " + ",".join(nodes))
        if self.refuse:
            raise AdmissionError(
                f"{self.refuse}: the start needs 110.0 GiB, 96.0 GiB can be had", node=self.refuse
            )

    def inspect(self, conn, name: str):  # noqa: ANN001, ANN201
        if name == self.exits:
            return SimpleNamespace(status="exited", exit_code=1)
        return SimpleNamespace(status="running", exit_code=0) if name in self.running else None

    def wait(self, pool, plan, deadline, **kw) -> WaitResult:  # noqa: ANN001, ANN003
        self.events.append("wait ready")
        return WaitResult(0.0, EndpointHealth(True, ["m"], True, "ok"), 0.0)


@pytest.fixture
def wired(monkeypatch: pytest.MonkeyPatch):
    def make(refuse: str | None = None) -> Cluster:
        c = Cluster(refuse)
        monkeypatch.setattr(steps, "record_attempt", lambda plan, outcome: None)
        monkeypatch.setattr(memgate, "gate", lambda *a: c.events.append("admission before the start"))
        monkeypatch.setattr(steps, "prepare_nodes", lambda *a: None)
        monkeypatch.setattr(steps, "start_specs", c.start)
        monkeypatch.setattr(steps, "remove_started", c.remove)
        monkeypatch.setattr(steps, "wait_ready", c.wait)
        monkeypatch.setattr(gated, "gate_call", c.gate_call)
        monkeypatch.setattr(containers, "inspect", c.inspect)  # gated.exited_rank's view of the ranks
        fake = partial(gated.open_gates, admit=c.admit, sleep=lambda s: None)
        monkeypatch.setattr(gated, "open_gates", fake)
        return c

    return make


def test_a_gated_group_is_admitted_and_opened_after_every_rank_started_before_readiness(wired) -> None:
    c, tl, said = wired(), Timeline(), Said()
    plan = build_plan(dual_spark(True), "tp2")
    assert plan.groups[0].gate is not None
    steps.start_group(dual_spark(True), POOL, plan, 1e12, 600.0, said, tl=tl)  # type: ignore[arg-type]
    assert c.events == [
        "admission before the start",
        "start rank 1 on spark2",
        "start rank 0 on spark1",
        "GET http://127.0.0.1:50058/health",
        "admit spark1,spark2",
        "POST http://127.0.0.1:50058/gate/activate",
        "wait ready",
    ]
    assert "replica 0: launch gate opened on spark1: the ranks load" in said.lines
    assert [s.name for s in tl.steps].count("launch gate") == 1


def test_a_refusal_at_the_gate_stops_every_rank_started_and_never_opens_it(wired) -> None:
    c = wired(refuse="spark2")
    with pytest.raises(AdmissionError) as err:
        steps.start_group(dual_spark(True), POOL, build_plan(dual_spark(True), "tp2"), 1e12, 600.0, Said())  # type: ignore[arg-type]
    assert c.running == set()
    assert c.events[-3:] == ["admit spark1,spark2", "kill rank 1 on spark2", "kill rank 0 on spark1"]
    assert not any(e.startswith(("POST", "wait")) for e in c.events)
    assert err.value.node == "spark2" and "refused at the launch gate" in err.value.message


def test_an_ungated_group_starts_as_before(wired) -> None:
    c = wired()
    plan = build_plan(dual_spark(False), "tp2")
    assert all(g.gate is None for g in plan.groups)
    steps.start_group(dual_spark(False), POOL, plan, 1e12, 600.0, Said())  # type: ignore[arg-type]
    assert c.events == [
        "admission before the start",
        "start rank 1 on spark2",
        "start rank 0 on spark1",
        "wait ready",
    ]


def test_a_rank_that_exits_before_the_gate_answers_ends_the_wait_and_the_rollback_stops_the_rest(
    wired,
) -> None:
    c = wired()
    plan = build_plan(dual_spark(True), "tp2")
    c.exits = plan.ranks[1].container_name  # so it never joins: the gate does not answer
    with pytest.raises(gated.GateError) as err:
        steps.start_group(dual_spark(True), POOL, plan, 1e12, 600.0, Said())  # type: ignore[arg-type]
    assert err.value.message.startswith(f"rank 1 on spark2 ({c.exits}) exited (code 1) before the group")
    assert c.running == set() and "wait ready" not in c.events
