"""engines/sglang/launch/inputs.py: LaunchSettings.from_argv reads each field from its flags (the
first alias set wins) with SGLang's defaults where a flag is absent."""

from __future__ import annotations

from sparkctl.engines.sglang.launch.inputs import LaunchSettings

BASE = ["python3", "-m", "sglang.launch_server", "--model-path", "m"]


def test_absent_flags_take_sglangs_defaults() -> None:
    s = LaunchSettings.from_argv(BASE)
    assert (s.tp, s.pp, s.nnodes, s.kv_cache_dtype, s.mamba_strategy) == (1, 1, 1, "auto", "auto")
    assert (s.mamba_full_memory_ratio, s.mamba_track_interval) == (0.9, 256)
    assert s.page_size is None and s.mem_fraction_static is None and s.disable_cuda_graph is False


def test_aliases_values_and_switches_are_read() -> None:
    s = LaunchSettings.from_argv(
        [
            *BASE,
            "--tensor-parallel-size",
            "2",
            "--pp-size",
            "2",
            "--mem-fraction-static",
            "0.7",
            "--mamba-scheduler-strategy",
            "extra_buffer",
            "--page-size",
            "64",
            "--disable-cuda-graph",
            "--speculative-algorithm",
            "DFLASH",
        ]
    )
    assert (s.tp, s.pp, s.mem_fraction_static, s.page_size) == (2, 2, 0.7, 64)
    assert s.mamba_strategy == "extra_buffer" and s.disable_cuda_graph is True and s.is_dflash
    assert s.effective_max_running_requests == 48  # SGLang's cap under speculation
