"""Deterministic long text for prompts: verify's long-context checks and bench's prefill workloads
(bench imports it from here; verify imports nothing of bench)."""

from __future__ import annotations

_WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
]


def filler(words: int, seed: str = "") -> str:
    """Deterministic long text; `seed` first so different seeds share no cacheable prefix."""
    body = " ".join(_WORDS[i % len(_WORDS)] for i in range(words))
    return f"{seed}\n{body}" if seed else body
