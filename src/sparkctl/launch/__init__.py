"""Launch safety: SGLang's own flag parser, version/GPU-keyed rules, and the memory planner.

Entry point for callers: `sparkctl.launch.check.check_plan(plan, profile, run_in_image=...)`.
"""
