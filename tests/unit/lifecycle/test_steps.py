"""`up`'s final error: a node lost during start is exit 5 whichever thread noticed first."""

from __future__ import annotations

from sparkctl.errors import ConnectError, ExitCode, SparkctlError
from sparkctl.lifecycle.orphans import pending_item
from sparkctl.lifecycle.steps import as_node_loss
from sparkctl.lifecycle.watch import RankFailedError


def test_a_node_the_rollback_could_not_reach_makes_any_failure_exit_5() -> None:
    left = [pending_item("spark2", "sparkctl-x-tp2-r1", 1, "tp2", "connection reset")]
    # what the watch may see first when spark2 drops: a rank that looks dead (exit 3) ...
    died = RankFailedError("rank 0 exited (137) while starting", node="spark1", rank=0, logs=[])
    # ... or a Docker call cut mid-way, wrapped as a plain error (exit 3)
    cut = SparkctlError("ChunkedEncodingError: connection broken", node="spark2", rank=1)
    for first in (died, cut):
        final = as_node_loss(first, left)
        assert isinstance(final, ConnectError) and final.exit_code == ExitCode.CONNECT
        assert final.node == "spark2" and "lost the connection to node spark2" in final.message
    lost = ConnectError("lost the connection to node spark2", node="spark2")
    assert as_node_loss(lost, left) is lost  # already the truth: kept as it is
    assert as_node_loss(died, []) is died  # every node answered the rollback: the rank did die
    interrupted = KeyboardInterrupt()
    assert as_node_loss(interrupted, left) is interrupted  # Ctrl-C stays 130


def test_a_gateway_just_restarted_is_given_its_start_before_serving_is_judged(monkeypatch) -> None:
    """`up` restarted only a gateway: its first probes may meet it binding (HTTP 503 or refused).
    With `settle` they are retried; without it one failed probe means not serving."""
    import time
    from types import SimpleNamespace

    from sparkctl.lifecycle import steps
    from sparkctl.runtime.readiness import EndpointHealth

    answers: list[EndpointHealth] = []

    def probe(ep: object) -> EndpointHealth:
        answers.append(ep)  # type: ignore[arg-type]
        ready = len(answers) >= 3
        return EndpointHealth(ready, ["m"], ready, "ok" if ready else "/v1/models: HTTP 503")

    monkeypatch.setattr(steps, "probe", probe)
    monkeypatch.setattr(steps, "endpoints", lambda plan: ["rank0"])
    monkeypatch.setattr(steps.time, "sleep", lambda s: None)
    plan = SimpleNamespace(router=None)
    far = time.monotonic() + 60
    health, started = steps.serving(None, None, plan, far, None, settle=5.0)  # type: ignore[arg-type]
    assert health.ready and not started and len(answers) == 3
    answers.clear()
    health, _ = steps.serving(None, None, plan, far, None)  # type: ignore[arg-type]
    assert not health.ready and health.detail == "/v1/models: HTTP 503" and len(answers) == 1
