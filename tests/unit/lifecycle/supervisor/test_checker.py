"""The supervisor's checks off its loop's thread (lifecycle/supervisor/checker.py): a cause is
posted and wakes the loop; a pause drops a round in flight; a resume resets the check on the
checker's own thread; a check that raises is said once and tried again. And the scheduling in
the loop (supervise.py): a canary hanging to its deadline delays neither a partition nor a
rank's death. Every wait here is for an event (a bounded wait only turns a hang into a failure).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from sparkctl.connectors.base import RunResult
from sparkctl.lifecycle import state
from sparkctl.lifecycle.supervisor import canary as canaries
from sparkctl.lifecycle.supervisor import checker, heartbeat, supervise
from sparkctl.lifecycle.supervisor.canary import Canary
from sparkctl.lifecycle.supervisor.checker import Checker, Checks
from sparkctl.lifecycle.supervisor.process import Policy, StopFlag
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_text
from sparkctl.runtime.containers import ContainerInfo

ROOT = Path(__file__).resolve().parents[4]
DUAL = (ROOT / "profiles" / "dual-spark.yaml").read_text()
HANG = 60.0  # a hang turned into a failure: never reached when the code is right


@pytest.fixture(autouse=True)
def _state(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def _checker(check, wake: threading.Event, resets: list[str] | None = None) -> Checker:
    def reset() -> None:
        if resets is not None:
            resets.append(threading.current_thread().name)

    return Checker("t", check, lambda: 0.0, reset, wake, "lab")


def test_a_cause_is_posted_once_wakes_the_loop_and_waits_for_resume() -> None:
    wake, rounds = threading.Event(), []

    def check() -> dict | None:
        rounds.append(1)
        return {"cause": "found"} if len(rounds) == 3 else None

    c = _checker(check, wake).start()
    try:
        assert wake.wait(HANG)
        assert c.paused and c.take() == {"cause": "found"} and c.take() is None
        assert len(rounds) == 3  # no round after the cause until the loop resumes it
    finally:
        c.stop()


def test_a_pause_drops_the_round_in_flight_and_resume_resets_on_the_checker_thread() -> None:
    wake, entered, release, reset_done = (
        threading.Event(),
        threading.Event(),
        threading.Event(),
        threading.Event(),
    )
    resets: list[str] = []

    def check() -> dict | None:
        if not reset_done.is_set():
            entered.set()
            release.wait(HANG)
            return {"cause": "the old group's"}
        return None

    c = Checker(
        "t",
        check,
        lambda: 0.0,
        lambda: (resets.append(threading.current_thread().name), reset_done.set()),
        wake,
        "lab",
    )
    c.start()
    try:
        assert entered.wait(HANG)
        c.pause()  # the loop acts on something else: what this round finds is stale
        release.set()
        c.resume()
        assert reset_done.wait(HANG)  # the reset runs after the dropped round, before the next
        assert c.take() is None and not wake.is_set()
        assert resets == ["check-t"]  # on the checker's thread, never the loop's
    finally:
        c.stop()


def test_a_check_that_raises_is_said_once_and_tried_again(monkeypatch) -> None:
    monkeypatch.setattr(checker, "AFTER_ERROR_S", 0.0)
    wake, calls = threading.Event(), []

    def check() -> dict | None:
        calls.append(1)
        if len(calls) < 4:
            raise ValueError("bad answer")
        return {"cause": "then found"}

    c = _checker(check, wake).start()
    try:
        assert wake.wait(HANG) and c.take() == {"cause": "then found"}
    finally:
        c.stop()
    failed = [e for e in state.events("lab") if e["event"] == "check_failed"]
    assert len(failed) == 1 and failed[0]["check"] == "t" and failed[0]["detail"] == "ValueError: bad answer"


# The loop: the two-node profile's tp2 (one fabric link each way), its ranks running.


class _Conn:
    def __init__(self, pool: _Pool, node: str) -> None:
        self.pool, self.node = pool, node

    def run(self, argv, timeout=None) -> RunResult:  # noqa: ANN001 - the heartbeat's probe
        if heartbeat.PROBE not in argv:  # the memory guard's read, on a death: no guard here
            return RunResult(self.node, tuple(argv), 1, "", "no guard")
        addresses = argv[argv.index(heartbeat.PROBE) + 2 :]
        answer = "timed out" if self.pool.cut.is_set() else "ok"
        self.pool.probes += 1
        return RunResult(self.node, tuple(argv), 0, json.dumps({a: answer for a in addresses}), "")


class _Pool:
    _connectors: dict = {}

    def __init__(self) -> None:
        self.cut, self.probes = threading.Event(), 0

    def get(self, node: str) -> _Conn:
        return _Conn(self, node)


def _info(name: str, status: str) -> ContainerInfo:
    code = 137 if status == "exited" else None
    return ContainerInfo("n", name, "id", status, code, False, None, None, "img", "sha", {})


class _Run:
    """supervise._loop on a thread, with a canary whose request hangs until released."""

    def __init__(self, monkeypatch, pool: _Pool, dead: set[str]) -> None:  # noqa: ANN001
        self.prof = load_profile_text(DUAL)
        self.plan = build_plan(self.prof, "tp2")
        self.flag, self.pool = StopFlag(), pool
        self.canary_in, self.canary_release, self.decided = (
            threading.Event(),
            threading.Event(),
            threading.Event(),
        )
        self.canary_busy_at_decision: bool | None = None

        def hanging_canary(plan, key, timeout):  # noqa: ANN001 - a request to a partitioned pair
            self.canary_in.set()
            self.canary_release.wait(HANG)
            return "TimeoutError: timed out"

        def decided(*args, **kw) -> bool:  # noqa: ANN002, ANN003 - the hold (a partition) or the restart
            self.canary_busy_at_decision = self.canary_in.is_set() and not self.canary_release.is_set()
            self.flag.event.set()  # end the loop here
            self.decided.set()  # the canary stays hung until finish(), after the checks stop
            return False

        monkeypatch.setattr(canaries, "canary", hanging_canary)
        monkeypatch.setattr(supervise, "_hold_for_link", decided)
        monkeypatch.setattr(supervise, "_restart", decided)
        monkeypatch.setattr(
            supervise.containers,
            "inspect",
            lambda conn, name: _info(name, "exited" if name in dead else "running"),
        )
        monkeypatch.setattr(heartbeat, "EVERY_S", 0.01)
        monkeypatch.setattr(heartbeat, "SILENT_S", 0.2)
        policy = Policy(canary_every=0.01, canary_failures=1)
        beat = heartbeat.Heartbeat(heartbeat.links(self.prof, self.plan), time.monotonic())
        self.checks = Checks(pool, Canary(self.plan, None, policy), beat, self.flag.wake, self.plan.cluster)
        self.result: list[int] = []

        def loop() -> None:
            self.result.append(
                supervise._loop(
                    self.prof, pool, self.plan, policy, self.flag, self.checks.start(), beat.links, None
                )  # type: ignore[arg-type]
            )

        self.thread = threading.Thread(target=loop, daemon=True)

    def finish(self) -> list[dict]:
        self.flag.event.set()
        self.flag.wake.set()
        self.thread.join(HANG)
        self.checks.stop()  # then the hung canary returns: a stopped round records nothing
        self.canary_release.set()  # whatever happened: nothing may hang
        return state.events(self.plan.cluster)


def test_a_canary_hanging_to_its_deadline_does_not_delay_the_partition_decision(monkeypatch) -> None:
    pool = _Pool()
    run = _Run(monkeypatch, pool, dead=set())
    run.thread.start()
    try:
        assert run.canary_in.wait(HANG)  # the canary's request hangs from here on
        pool.cut.set()  # the fabric link cut: the heartbeat alone can see it
        assert run.decided.wait(HANG), "no decision while the canary hung"
    finally:
        evs = run.finish()
    assert run.canary_busy_at_decision is True  # decided while the canary's request still hung
    kinds = [e["event"] for e in evs]
    assert kinds[: kinds.index("restarting") + 1][-2:] == ["partition", "restarting"], kinds
    restarting = next(e for e in evs if e["event"] == "restarting")
    assert restarting["detected_by"] == "heartbeat" and restarting["cause"].startswith("fabric partition: ")
    assert {restarting["node"], restarting["peer"]} == {"spark1", "spark2"}
    assert "canary_failed" not in kinds[: kinds.index("restarting")]
    assert run.result == [0] and kinds[-1] == "supervisor_stopped"


def test_a_rank_death_is_acted_on_while_the_canary_hangs(monkeypatch) -> None:
    pool, dead = _Pool(), set()
    run = _Run(monkeypatch, pool, dead)
    run.thread.start()
    try:
        assert run.canary_in.wait(HANG)
        dead.add(run.plan.rank(1).container_name)
        run.flag.wake.set()  # what the death watch does on Docker's `die`
        assert run.decided.wait(HANG), "no decision while the canary hung"
    finally:
        evs = run.finish()
    assert run.canary_busy_at_decision is True
    restarting = next(e for e in evs if e["event"] == "restarting")
    assert restarting["cause"] == "rank 1 on spark2 exited (exit code 137)" and restarting["rank"] == 1


def test_the_checks_are_the_links_heartbeat_and_the_canary_and_pause_while_a_node_is_lost() -> None:
    prof = load_profile_text(DUAL)
    plan, solo = build_plan(prof, "tp2"), build_plan(prof, "solo")
    wake, pool = threading.Event(), _Pool()

    def checks(p, every: float) -> Checks:  # noqa: ANN001 - a plan
        beat = heartbeat.Heartbeat(heartbeat.links(prof, p), time.monotonic())
        return Checks(pool, Canary(p, None, Policy(canary_every=every)), beat, wake, p.cluster)

    assert sorted(checks(plan, 10.0).by_name) == ["canary", "heartbeat"]
    assert sorted(checks(plan, 0.0).by_name) == ["heartbeat"]  # --canary-every 0: no canary
    assert sorted(checks(solo, 10.0).by_name) == ["canary"]  # one node: no link to check
    both = checks(plan, 10.0).start()
    try:
        both.node_lost(True)
        assert all(c.paused for c in both.by_name.values())
        both.node_lost(True)  # still lost: nothing changes
        both.node_lost(False)  # every node back: both resume (reset)
        assert not any(c.paused for c in both.by_name.values())
    finally:
        both.stop()
