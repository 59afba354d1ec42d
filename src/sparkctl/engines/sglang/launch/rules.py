"""Launch rules keyed by SGLang version and GPU compute capability: each returns Findings.

Attention backends vs GPU live in `launch/rules_attention.py`, the DFLASH rules in
`launch/rules_dflash.py`; this module has the rest and the helper they all build findings with.
Every rule cites the SGLang 0.5.23 file it mirrors (docs/launch-safety.md lists them all). A
finding whose fix can be applied mechanically carries it as `data["fix_flags"]`, so the combined
fix can be re-checked by the very same rules.
"""

from __future__ import annotations

import json

from sparkctl.engines.sglang.launch.inputs import (
    GB10_MAX_MEM_FRACTION,
    HUMAN_INT_FLAGS,
    GpuFacts,
    LaunchSettings,
    bad_value,
)
from sparkctl.engines.sglang.launch.model_meta import ModelFacts, yarn_rope
from sparkctl.findings import Finding, Severity

ERROR, WARN, OK = Severity.ERROR, Severity.WARN, Severity.OK
DFLASH_MAX_CONTEXT = 262144


def rule_finding(check: str, sev: Severity, msg: str, fix: str | None = None, **data) -> Finding:
    """A finding of one launch rule; `data` carries `fix_flags` (a mechanical fix) and `source`."""
    return Finding(check=check, severity=sev, message=msg, fix=fix, data=data)


_f = rule_finding


def check_context(
    s: LaunchSettings, target: ModelFacts | None, draft: ModelFacts | None, env: dict[str, str]
) -> list[Finding]:
    """YaRN / long context with DFLASH (recipe: the draft config inherits max_position_embeddings
    and fails at boot) and configs/model_config.py: _derive_context_length."""
    out: list[Finding] = []
    ctx = s.context_length
    allow = env.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "") not in ("", "0", "false", "False")
    override: dict = {}
    if s.json_model_override_args:
        try:
            override = json.loads(s.json_model_override_args)
        except json.JSONDecodeError:
            override = {}
    # every shape: rope_scaling / rope_parameters, top level / text_config, per layer type
    in_override = yarn_rope(override) is not None if isinstance(override, dict) else False
    in_model = (
        target is not None
        and target.rope_scaling is not None
        and yarn_rope({"rope_parameters": target.rope_scaling}) is not None
    )
    yarn = in_override or in_model
    if s.is_dflash and (yarn or (ctx or 0) > DFLASH_MAX_CONTEXT):
        where = (
            "--json-model-override-args" if in_override else f"{target.name if target else 'the'} config.json"
        )
        why = f"YaRN rope scaling ({where})" if yarn else f"--context-length {ctx} (> {DFLASH_MAX_CONTEXT})"
        out.append(
            _f(
                "YarnWithDflash",
                ERROR,
                (
                    f"{why} with DFLASH: the context extension leaks into the draft model's config and the "
                    "server dies at boot (AttributeError ... max_position_embeddings)"
                ),
                (
                    f"serve a snapshot of {target.name} without YaRN in its config.json, or drop DFLASH"
                    if in_model and not in_override
                    else f"--context-length {DFLASH_MAX_CONTEXT} and no YaRN override"
                ),
                fix_flags=(
                    {}
                    if in_model and not in_override
                    else {"context-length": str(DFLASH_MAX_CONTEXT), "json-model-override-args": None}
                ),
            )
        )
    if ctx and target is not None and ctx > target.derived_context_len and not allow and not yarn:
        out.append(
            _f(
                "ContextLength",
                ERROR,
                (
                    f"Warning: User-specified context_length ({ctx}) is greater than the derived context_length "
                    f"({target.derived_context_len}). ... To allow overriding this maximum, set the env var "
                    "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
                ),
                f"--context-length {target.derived_context_len}",
                fix_flags={"context-length": str(target.derived_context_len)},
            )
        )
    return out


def check_mem_fraction(s: LaunchSettings, gpus: list[GpuFacts]) -> list[Finding]:
    frac = s.mem_fraction_static
    if frac is not None and not 0 < frac < 1:  # SGLang's parser takes any float; 1.5 fails at load
        return [
            _f(
                "MemFraction",
                ERROR,
                f"--mem-fraction-static {frac}: a fraction of each GPU's memory, between 0 and 1",
                "--mem-fraction-static 0.8 (engine.args.mem-fraction-static: 0.8; `sparkctl fit` sizes it)",
            )
        ]
    if any(g.is_gb10 for g in gpus) and (s.mem_fraction_static or 0) > GB10_MAX_MEM_FRACTION:
        return [
            _f(
                "MemFractionGB10",
                ERROR,
                (
                    f"--mem-fraction-static {s.mem_fraction_static} on GB10: above {GB10_MAX_MEM_FRACTION} the unified "
                    "memory runs out during 'Capture target verify CUDA graph' and the whole machine hard-reboots"
                ),
                f"--mem-fraction-static {GB10_MAX_MEM_FRACTION}",
                fix_flags={"mem-fraction-static": f"{GB10_MAX_MEM_FRACTION:.2f}"},
            )
        ]
    return []


def check_tp(
    s: LaunchSettings,
    gpus_per_node: dict[str, int],
    group_nnodes: int | None = None,
    slots_per_node: dict[str, int] | None = None,
) -> list[Finding]:
    """tp x pp ranks spread evenly over the nodes of ONE replica group (validation_hook.py:179),
    each node needing that many GPUs per rank it holds. `gpus_per_node`: every box of the mode
    once; `group_nnodes`: the nodes of one group (default: all of them, one group);
    `slots_per_node`: how many ranks of all replicas each box holds (default 1), so idle and
    missing GPUs are counted per box over every replica on it."""
    nnodes = max(group_nnodes or len(gpus_per_node), 1)
    slots = slots_per_node or {}
    world = s.tp * s.pp
    if world % nnodes:
        return [
            _f(
                "TpVsGpus",
                ERROR,
                f"tp={s.tp} x pp={s.pp} does not split evenly over the {nnodes} node(s) of a replica: "
                "SGLang asserts 'tp_size must be divisible by number of nodes'",
                f"use a tp x pp that is a multiple of {nnodes}",
                source="srt/arg_groups/validation_hook.py:179",
            )
        ]
    per_rank = world // nnodes
    need = {n: per_rank * slots.get(n, 1) for n in gpus_per_node}
    short = {n: g for n, g in gpus_per_node.items() if g < need[n]}
    if short:
        where = ", ".join(f"{n} has {g} for {need[n]}" for n, g in short.items())
        ranks = max(slots.get(n, 1) for n in short)
        fit = min(gpus_per_node[n] // max(slots.get(n, 1), 1) for n in gpus_per_node) * nnodes
        fix = f"set tp to {fit} or add GPUs" if fit else "use fewer replicas per box or add GPUs"
        per = (
            f"{per_rank} GPU(s) per rank, {ranks} rank(s) on a box"
            if ranks > 1
            else f"{per_rank} GPU(s) per node"
        )
        return [_f("TpVsGpus", ERROR, f"tp={s.tp} needs {per}; {where}", fix)]
    idle = {n: g - need[n] for n, g in gpus_per_node.items() if g > need[n]}
    if idle:
        where = ", ".join(f"{n}: {k}" for n, k in idle.items())
        return [_f("TpVsGpus", WARN, f"tp={s.tp} leaves GPUs idle ({where})")]
    return []


def check_sleep_on_idle(s: LaunchSettings) -> list[Finding]:
    if s.sleep_on_idle:
        return []
    return [
        _f(
            "SleepOnIdle",
            WARN,
            "without --sleep-on-idle the SGLang scheduler busy-spins ~97 % of a CPU core while idle",
            "--sleep-on-idle",
            fix_flags={"sleep-on-idle": True},
        )
    ]


def check_version(s: LaunchSettings, ruleset: str) -> list[Finding]:
    """A flag renamed between the modelled releases (kept even when the parser check is skipped)."""
    out: list[Finding] = []
    if ruleset == "0.5.23" and "mamba-scheduler-strategy" in s.flags:
        out.append(
            _f(
                "FlagRenamed",
                ERROR,
                "--mamba-scheduler-strategy was renamed --mamba-radix-cache-strategy (SGLang 0.5.23)",
                "--mamba-radix-cache-strategy " + s.mamba_strategy,
                fix_flags={"mamba-scheduler-strategy": None, "mamba-radix-cache-strategy": s.mamba_strategy},
            )
        )
    if ruleset == "0.5.12" and "mamba-radix-cache-strategy" in s.flags:
        out.append(
            _f(
                "FlagRenamed",
                ERROR,
                "--mamba-radix-cache-strategy does not exist before SGLang 0.5.16; "
                "0.5.12 and older call it --mamba-scheduler-strategy",
                "--mamba-scheduler-strategy " + s.mamba_strategy,
                fix_flags={"mamba-radix-cache-strategy": None, "mamba-scheduler-strategy": s.mamba_strategy},
            )
        )
    return out


def check_heads(
    s: LaunchSettings, model: ModelFacts | None, role: str = "target", max_tp: int | None = None
) -> list[Finding]:
    """Attention heads must split over tp (linear.py:1139 divide; qwen3_5.py:1293); KV heads must
    split too, or, when fewer than tp, tp must be a multiple of them (each head is replicated,
    linear.py:1140-1144, qwen3_5.py:1296-1299). Keyed on config.json; skipped with DP attention."""
    if model is None or s.tp <= 1 or s.flags.get("enable-dp-attention") is True:
        return []
    tp, heads, kv = s.tp, model.num_attention_heads, model.num_kv_heads
    src = "srt/layers/linear.py:1139-1144"
    out: list[Finding] = []
    ok_tps = [
        t for t in range(1, 65) if (not heads or heads % t == 0) and (kv % t == 0 if kv >= t else t % kv == 0)
    ]
    if max_tp is not None:  # only what the group's GPUs hold: no tp=24 on three one-GPU boxes
        ok_tps = [t for t in ok_tps if t <= max_tp]
    held = f" and the {max_tp} GPU(s) of the group hold" if max_tp is not None else ""
    fix = f"a tp that divides the heads{held}: one of {', '.join(map(str, ok_tps[:8]))}"
    if heads and heads % tp:
        out.append(
            _f(
                "TpVsHeads",
                ERROR,
                f"{role} {model.name}: {heads} attention heads do not split over tp={tp} "
                f"(SGLang asserts '{heads} is not divisible by {tp}' while building the model)",
                fix,
                source=src,
            )
        )
    if kv >= tp and kv % tp:
        out.append(
            _f(
                "TpVsHeads",
                ERROR,
                f"{role} {model.name}: {kv} KV heads do not split over tp={tp} "
                f"('{kv} is not divisible by {tp}')",
                fix,
                source=src,
            )
        )
    elif kv < tp and tp % kv:
        out.append(
            _f(
                "TpVsHeads",
                ERROR,
                f"{role} {model.name}: tp={tp} is not a multiple of its {kv} KV heads, "
                f"so they cannot be replicated evenly ('{tp} is not divisible by {kv}')",
                fix,
                source=src,
            )
        )
    return out


# Numeric flags the checks read, with the type SGLang's parser converts them with.
NUMERIC_FLAGS: dict[str, type] = {
    "tp-size": int,
    "tp": int,
    "tensor-parallel-size": int,
    "pp-size": int,
    "pp": int,
    "nnodes": int,
    "mem-fraction-static": float,
    "context-length": int,
    "max-prefill-tokens": int,
    "max-running-requests": int,
    "max-total-tokens": int,
    "chunked-prefill-size": int,
    "page-size": int,
    "max-mamba-cache-size": int,
    "mamba-full-memory-ratio": float,
    "mamba-track-interval": int,
    "speculative-num-draft-tokens": int,
    "speculative-dflash-block-size": int,
    "speculative-draft-window-size": int,
    "stream-interval": int,
}


def check_values(s: LaunchSettings) -> list[Finding]:
    """Values SGLang's parser would reject (run when the parser itself could not run)."""
    out: list[Finding] = []
    for name, kind in NUMERIC_FLAGS.items():
        bad = bad_value(s.flags, name, kind)
        if bad is not None:
            what = (
                "an integer (or 32k / 512Ki)"
                if name in HUMAN_INT_FLAGS
                else f"{'an integer' if kind is int else 'a number'}"
            )
            out.append(
                _f(
                    "FlagsValid",
                    ERROR,
                    f"--{name} {bad!r} is not {what}: SGLang's parser exits with "
                    f"'invalid {kind.__name__} value'",
                    f"give --{name} a number",
                    flag=f"--{name}",
                    value=bad,
                )
            )
    return out
