"""Byte counts for people: one formatter for every message and table."""

from __future__ import annotations


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB', 20e9 -> '18.6 GiB' (binary units, like df -h and the GPU tools)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
