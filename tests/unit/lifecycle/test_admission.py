"""Admission on a unified-memory node (lifecycle/admission.py): refuse with numbers and a fix."""

from __future__ import annotations

from sparkctl.engines.support.launch_check import Serving
from sparkctl.lifecycle.admission import GIB, NodeMemory, judge, max_fraction, parse_size

FLAG = "mem-fraction-static"  # the engine's memory-fraction flag the fixes name (Engine.mem_fraction_flag)


def mem(avail: float, cached: float = 0.0, cuda: float | None = None) -> NodeMemory:
    c = int(cuda * GIB) if cuda is not None else None
    return NodeMemory("spark1", int(avail * GIB), int(avail * GIB), int(128 * GIB), int(cached * GIB), c)


def test_admits_what_leaves_the_reserve() -> None:
    v = judge(mem(100), fraction=0.8, ranks=1, shm=0, reserve=4 * GIB, flag=FLAG)
    assert v.ok and v.left == 20 * GIB


def test_refuses_with_the_numbers_and_a_lower_fraction() -> None:
    v = judge(mem(100), fraction=0.9, ranks=1, shm=8 * GIB, reserve=4 * GIB, flag=FLAG)
    assert not v.ok
    msg = v.message()
    assert "0.9 x MemAvailable 100.0 GiB = 90.0 GiB, shm 8.0 GiB" in msg
    assert "of MemAvailable 100.0 GiB that leaves 2.0 GiB < the host reserve 4.0 GiB" in msg
    assert v.fixes[0].startswith("--mem-fraction-static 0.88 ")  # (100 - 8 - 4) / 100


def test_the_probed_cuda_free_memory_is_the_budget_when_smaller() -> None:
    """The GB10 report: CUDA could allocate ~102 GiB while MemAvailable said 121, so a 0.87
    fraction (sized from MemAvailable) never booted."""
    v = judge(mem(121, cuda=102), fraction=0.87, ranks=1, shm=0, reserve=4 * GIB, flag=FLAG)
    assert (
        not v.ok
        and v.budget == 102 * GIB
        and "of CUDA free memory (probed in the image) 102.0 GiB" in v.message()
    )
    assert v.fixes[0].startswith("--mem-fraction-static 0.8 ")  # (102 - 4) / 121 = 0.809
    assert judge(
        mem(121), fraction=0.87, ranks=1, shm=0, reserve=4 * GIB, flag=FLAG
    ).ok  # MemAvailable alone: admitted


def test_the_fix_says_how_many_requests_still_fit_and_offers_a_smaller_context() -> None:
    asked = []

    def planner(fraction: float, budget: int) -> Serving:
        asked.append((fraction, budget))
        return Serving(requests=48, kv_tokens=20000, context=32768, fits=False)

    v = judge(mem(100, cached=30), fraction=0.97, ranks=1, shm=0, reserve=4 * GIB, flag=FLAG, planner=planner)
    assert asked == [(0.96, 100 * GIB)]
    assert any("--context-length 20000" in f for f in v.fixes)
    assert any("drop the page cache (30.0 GiB cached" in f and "drop_caches" in f for f in v.fixes)

    ok = judge(
        mem(100),
        fraction=0.97,
        ranks=1,
        shm=0,
        reserve=4 * GIB,
        flag=FLAG,
        planner=lambda f, b: Serving(48, 90000, 32768, True),
    )
    assert (
        ok.fixes[0]
        == "--mem-fraction-static 0.96: still serves 48 requests at once (90000 KV tokens, context 32768)"
    )


def test_two_ranks_on_one_node_share_it_and_nothing_fits_says_so() -> None:
    assert max_fraction(100 * GIB, 100 * GIB, 0, 4 * GIB, 2) == 0.48
    v = judge(mem(3), fraction=0.5, ranks=1, shm=0, reserve=4 * GIB, flag=FLAG)
    assert not v.ok and v.fixes[0].startswith("nothing fits")


def test_shm_size_parses_docker_units() -> None:
    assert parse_size("64m") == 64 << 20 and parse_size("16g") == 16 << 30 and parse_size(None) == 0


def test_the_fix_names_the_engines_own_memory_flag() -> None:
    v = judge(mem(100), fraction=0.95, ranks=1, shm=0, reserve=8 * GIB, flag="gpu-memory-utilization")
    assert v.fixes[0].startswith(
        "--gpu-memory-utilization 0.92 (engine.args: {gpu-memory-utilization: 0.92})"
    )
