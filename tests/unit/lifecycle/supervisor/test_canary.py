"""The generation canary (lifecycle/supervisor/canary.py): its first-token deadline follows the
measured time of the last canaries, within 5-20 s."""

from __future__ import annotations

from sparkctl.lifecycle.supervisor.canary import CANARY_TIMEOUT, canary_deadline


def test_the_canary_deadline_follows_the_measured_first_token_time() -> None:
    assert canary_deadline([]) == CANARY_TIMEOUT  # nothing measured yet
    assert canary_deadline([0.05, 0.2]) == 5.0  # a fast engine: the floor
    assert canary_deadline([0.9, 1.2]) == 12.0  # 10x the slowest recent one
    assert canary_deadline([3.0]) == CANARY_TIMEOUT  # never above the old fixed deadline
