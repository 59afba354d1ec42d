"""DSPARK speculative-decoding rules: srt/arg_groups/speculative_hook.py `_handle_dspark` (SGLang
0.5.23). DSPARK is of the DFLASH family for memory (its draft keeps a KV pool of its own, sized
per target token: pool_configurator.py:316, `is_dflash_family`), but verifies gamma + 1 tokens a
step, where gamma is `--speculative-dspark-block-size` or the draft checkpoint's block size (7
when neither says)."""

from __future__ import annotations

from sparkctl.engines.sglang.launch.inputs import DSPARK_DEFAULT_GAMMA, LaunchSettings
from sparkctl.engines.sglang.launch.model_meta import ModelFacts
from sparkctl.engines.sglang.launch.rules import ERROR, WARN
from sparkctl.engines.sglang.launch.rules import rule_finding as _f
from sparkctl.findings import Finding

SOURCE = "srt/arg_groups/speculative_hook.py"


def check_dspark(s: LaunchSettings, draft: ModelFacts | None) -> list[Finding]:
    if not s.is_dspark:
        return []
    out: list[Finding] = []
    gamma = s.dspark_block_size
    if gamma is not None and gamma <= 0:
        out.append(
            _f(
                "DsparkBlockSize",
                ERROR,
                f"DSpark requires --speculative-dspark-block-size to be positive, got {gamma}.",
                source=SOURCE,
            )
        )
    elif gamma is None and s.num_draft_tokens is None and draft is not None and draft.dflash_block_size:
        gamma = draft.dflash_block_size
    d = s.num_draft_tokens
    if gamma and gamma > 0 and d is not None and d != gamma + 1:
        out.append(
            _f(
                "DsparkBlockSize",
                ERROR,
                (
                    f"DSpark speculative_num_draft_tokens must equal gamma + 1 (= {gamma + 1} for gamma={gamma}), "
                    f"but got speculative_num_draft_tokens={d}."
                ),
                f"--speculative-num-draft-tokens {gamma + 1} (or drop it: SGLang sets gamma + 1)",
                fix_flags={"speculative-num-draft-tokens": str(gamma + 1)},
                source=SOURCE,
            )
        )
    if d is not None and d < 2:
        out.append(
            _f(
                "DsparkBlockSize",
                ERROR,
                f"DSpark speculative_num_draft_tokens must be >= 2 (= gamma + 1), got {d}.",
                f"--speculative-dspark-block-size {DSPARK_DEFAULT_GAMMA}",
                fix_flags={
                    "speculative-num-draft-tokens": None,
                    "speculative-dspark-block-size": str(DSPARK_DEFAULT_GAMMA),
                },
                source=SOURCE,
            )
        )
    if s.pp != 1:
        out.append(
            _f(
                "DsparkPipeline",
                ERROR,
                "DSpark pipeline parallelism requires PD prefill; decode and non-disaggregated serving "
                "require pp_size == 1.",
                "drop --pp-size",
                fix_flags={"pp-size": None, "pp": None},
                source=SOURCE,
            )
        )
    if s.draft_model_path is None:
        out.append(
            _f(
                "DsparkDraftPath",
                WARN,
                "DSPARK without --speculative-draft-model-path: SGLang uses a draft bundled in the target "
                "checkpoint or its dspark/ subfolder, else stops with 'DSpark dense speculative decoding "
                "requires setting --speculative-draft-model-path'",
                "set model.draft in the profile unless the target ships its DSpark draft",
                source=SOURCE,
            )
        )
    return out
