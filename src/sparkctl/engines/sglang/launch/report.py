"""The memory plan as `fit` shows it: a table's heading and rows, the terms line (plain text).
Each function takes a memory.MemoryPlan (it calls these, so this module does not import it)."""

from __future__ import annotations

from typing import Any

from sparkctl.engines.sglang.launch.explain import count, gib

MemoryPlan = Any  # memory.MemoryPlan
GIB = 1 << 30


def heading(m: MemoryPlan) -> str:
    return f"{m.gpu}, tp={m.tp}, SGLang {m.ruleset} rules"


def rows(m: MemoryPlan) -> list[tuple[str, str]]:
    """(what, value) per rank, in the order SGLang spends the memory."""
    out = [
        ("mem fraction static", f"{m.mem_fraction_static:.3f} ({m.mem_fraction_source})"),
        ("free before load", f"{m.free_before_load / GIB:.2f} GiB ({m.free_source})"),
        ("target weights", f"{m.target_weights_per_rank / GIB:.2f} GiB"),
        ("draft weights", f"{m.draft_weights_per_rank / GIB:.2f} GiB"),
        ("free after load", gib(m.free_after_load)),
        ("reserved (1 - fraction)", f"{m.static_slack / GIB:.2f} GiB"),
        ("multimodal reservation", f"{m.mm_reservation / GIB:.2f} GiB"),
        ("left after load", gib(m.rest_after_load)),
    ]
    if m.mamba is not None:
        out += [
            ("mamba state / request", f"{m.mamba.per_req_bytes / (1 << 20):.1f} MiB ({m.mamba.strategy})"),
            ("mamba slots", f"{count(m.mamba.slots)} ({m.mamba.ratio} per request)"),
            ("spec mamba scratch", f"{m.mamba.intermediate_bytes / GIB:.2f} GiB"),
        ]
    return out + [
        ("KV budget", gib(m.kv_budget)),
        ("KV bytes / token", f"{m.kv_cell_bytes} (draft {m.kv_cell_draft_bytes})"),
        ("KV tokens", f"{m.kv_tokens:,}"),
        ("max running requests", str(m.max_running_requests)),
    ]


def terms_line(m: MemoryPlan) -> str:
    return f"SGLang terms used: {'; '.join(m.terms)}"
