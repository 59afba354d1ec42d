from __future__ import annotations

import threading

import pytest

from sparkctl.lifecycle.timeline import Timeline


def test_steps_are_measured_around_the_call_and_kept_when_it_raises() -> None:
    tl = Timeline(origin=100.0)
    tl.add("checks", 100.5, 102.0)
    tl.add("create+start", 102.0, 102.25, node="spark2", rank=1)
    with pytest.raises(RuntimeError), tl.step("admission"):
        raise RuntimeError("refused")
    got = tl.to_json()
    assert got[0] == {"step": "checks", "start_s": 0.5, "seconds": 1.5, "node": None, "rank": None}
    assert got[1]["step"] == "create+start" and got[1]["rank"] == 1 and got[1]["seconds"] == 0.25
    assert got[-1]["step"] == "admission" and got[-1]["seconds"] >= 0
    assert tl.ended("create+start", 1) == 102.25 and tl.ended("create+start", 0) is None
    assert tl.lines()[1] == "   2.00s +  0.25s  create+start rank 1@spark2"


def test_ranks_started_in_threads_each_get_their_step() -> None:
    tl = Timeline()

    def start(rank: int) -> None:
        with tl.step("create+start", node=f"n{rank}", rank=rank):
            pass

    threads = [threading.Thread(target=start, args=(r,)) for r in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(s["rank"] for s in tl.to_json()) == list(range(8))
