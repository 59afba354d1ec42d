"""Byte counts for people: one formatter for every message and table, one size parser."""

from __future__ import annotations

import re


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB', 20e9 -> '18.6 GiB' (binary units, like df -h and the GPU tools)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def parse_size(text: str | None) -> int:
    """Docker's shm_size ("64m", "16g", "1024") in bytes; 0 for none."""
    if not text:
        return 0
    m = re.fullmatch(r"(\d+)([bkmg]?)", text.strip().lower())
    if not m:
        return 0
    return int(m.group(1)) * {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2)]
