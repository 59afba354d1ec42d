"""DFLASH speculative-decoding rules: speculative_hook.py: _handle_dflash; mamba_hook.py:
validate_mamba_extra_buffer (the draft's attention backend: `launch/rules_attention.py`)."""

from __future__ import annotations

from sparkctl.engines.sglang.launch.inputs import LaunchSettings
from sparkctl.engines.sglang.launch.memory_terms import resolved_strategy
from sparkctl.engines.sglang.launch.model_meta import ModelFacts
from sparkctl.engines.sglang.launch.rules import ERROR, WARN
from sparkctl.engines.sglang.launch.rules import rule_finding as _f
from sparkctl.engines.sglang.launch.rules_dspark import check_dspark
from sparkctl.findings import Finding

SOURCE = "srt/arg_groups/speculative_hook.py"
MAMBA_SOURCE = "srt/arg_groups/mamba_hook.py"


def check_dflash(
    s: LaunchSettings, target: ModelFacts | None, draft: ModelFacts | None, ruleset: str = "0.5.23"
) -> list[Finding]:
    """speculative_hook.py: _handle_dflash; mamba_hook.py: validate_mamba_extra_buffer."""
    if not s.is_dflash:
        return []
    d = s.draft_tokens(draft.dflash_block_size if draft else None)
    if s.is_dspark:  # the DFLASH family: its own block-size and draft rules, the same mamba ones
        return [*check_dspark(s, draft), *_mamba_track_interval(s, target, ruleset, d), *_stream_interval(s)]
    return [
        *_draft_path_and_pp(s),
        *_block_size(s),
        *_draft_window(s, d),
        *_mamba_track_interval(s, target, ruleset, d),
        *_stream_interval(s),
    ]


def _draft_path_and_pp(s: LaunchSettings) -> list[Finding]:
    out: list[Finding] = []
    if s.draft_model_path is None:
        out.append(
            _f(
                "DflashDraftPath",
                ERROR,
                "DFLASH speculative decoding requires setting --speculative-draft-model-path.",
                "set model.draft in the profile",
                source=SOURCE,
            )
        )
    if s.pp != 1:
        out.append(
            _f(
                "DflashPipeline",
                ERROR,
                "Currently DFLASH speculative decoding only supports pp_size == 1.",
                "drop --pp-size",
                fix_flags={"pp-size": None, "pp": None},
                source=SOURCE,
            )
        )
    return out


def _block_size(s: LaunchSettings) -> list[Finding]:
    """--speculative-dflash-block-size: positive, and equal to --speculative-num-draft-tokens when both are set."""
    block, d = s.dflash_block_size, s.num_draft_tokens
    if block is None:
        return []
    if block <= 0:
        return [
            _f(
                "DflashBlockSize",
                ERROR,
                f"DFLASH requires --speculative-dflash-block-size to be positive, got {block}.",
                source=SOURCE,
            )
        ]
    if d is not None and d != block:
        return [
            _f(
                "DflashBlockSize",
                ERROR,
                (
                    "Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set but they "
                    f"differ. For DFLASH they must match. speculative_num_draft_tokens={d}, "
                    f"speculative_dflash_block_size={block}."
                ),
                f"--speculative-dflash-block-size {d}",
                fix_flags={"speculative-dflash-block-size": str(d)},
                source=SOURCE,
            )
        ]
    return []


def _draft_window(s: LaunchSettings, d: int) -> list[Finding]:
    if s.draft_window_size is None or s.draft_window_size >= d:
        return []
    return [
        _f(
            "DflashDraftWindow",
            ERROR,
            (
                "--speculative-draft-window-size must be >= --speculative-num-draft-tokens (block_size). "
                f"window_size={s.draft_window_size}, block_size={d}."
            ),
            f"--speculative-draft-window-size {d}",
            fix_flags={"speculative-draft-window-size": str(d)},
            source=SOURCE,
        )
    ]


def _mamba_track_interval(
    s: LaunchSettings, target: ModelFacts | None, ruleset: str, d: int
) -> list[Finding]:
    """mamba_hook.py: the extra_buffer strategy tracks state every --mamba-track-interval tokens."""
    extra_buffer = (  # resolved exactly as the memory planner resolves it (arch, release, overlap)
        target is not None
        and target.is_hybrid
        and not s.disable_radix_cache
        and resolved_strategy(s, target, ruleset).startswith("extra_buffer")
    )
    if not extra_buffer:
        return []
    out: list[Finding] = []
    if s.mamba_track_interval < d:
        out.append(
            _f(
                "MambaTrackInterval",
                ERROR,
                (
                    f"mamba extra_buffer: --mamba-track-interval {s.mamba_track_interval} is smaller than "
                    f"{d} draft tokens: SGLang fails 'assert view.mamba_track_interval >= "
                    "view.speculative_num_draft_tokens' (an AssertionError without a message)"
                ),
                "--mamba-track-interval 256",
                fix_flags={"mamba-track-interval": "256"},
                source=MAMBA_SOURCE,
            )
        )
    page = s.page_size or 1
    if s.mamba_track_interval % page:
        out.append(
            _f(
                "MambaTrackInterval",
                ERROR,
                (
                    f"mamba extra_buffer: --mamba-track-interval {s.mamba_track_interval} is not a multiple "
                    f"of --page-size {page} ('assert view.mamba_track_interval % view.page_size == 0')"
                ),
                source=MAMBA_SOURCE,
            )
        )
    return out


def _stream_interval(s: LaunchSettings) -> list[Finding]:
    if s.stream_interval == 1:
        return []
    return [
        _f(
            "StreamInterval",
            WARN,
            (
                "DFLASH without --stream-interval 1 packs 2-4 accepted tokens into one SSE event: clients "
                "that count chunks report about 4x too low tok/s"
            ),
            "--stream-interval 1",
            fix_flags={"stream-interval": "1"},
        )
    ]
