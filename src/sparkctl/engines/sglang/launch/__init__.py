"""Launch safety: SGLang's own flag parser, version/GPU-keyed rules, and the memory planner.

Entry point for callers: `sparkctl.engines.sglang.launch.check.check_plan(plan, profile, run_in_image=...)`.
"""

# Stable names of the findings this package emits (usable in `preflight --ignore/--only`).
CHECK_NAMES: frozenset[str] = frozenset(
    {
        "FlagsValid",
        "FlagRenamed",
        "MemoryFit",
        "AttentionBackendArch",
        "ContextLength",
        "DflashBlockSize",
        "DflashDraftPath",
        "DflashDraftWindow",
        "DflashPipeline",
        "MambaTrackInterval",
        "MemFraction",
        "MemFractionGB10",
        "SleepOnIdle",
        "StreamInterval",
        "TpVsGpus",
        "TpVsHeads",
        "YarnWithDflash",
    }
)
