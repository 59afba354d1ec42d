"""Disk facts: free space on the filesystem that holds a path, and the size of a directory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkctl.facts.probe import ParseError, Probe, checked, sh_argv

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector

# $1 = a path that may not exist yet: report the filesystem that would hold it.
DF_SCRIPT = 'p="$1"; while [ ! -e "$p" ] && [ "$p" != / ]; do p=$(dirname "$p"); done; df -Pk "$p"'


@dataclass(frozen=True)
class DiskUsage:
    path: str  # the path asked about
    mount: str
    total_kib: int
    avail_kib: int


def parse_df(text: str, path: str) -> DiskUsage:
    """`df -Pk <path>` (POSIX format: one line per filesystem, no wrapping)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) < 2:
        raise ParseError(f"df printed no filesystem line: {text[:120]!r}")
    parts = lines[-1].split()
    if len(parts) < 6 or not parts[1].isdigit() or not parts[3].isdigit():
        raise ParseError(f"unexpected df line: {lines[-1]!r}")
    return DiskUsage(path=path, mount=" ".join(parts[5:]), total_kib=int(parts[1]), avail_kib=int(parts[3]))


def df_probe(path: str) -> Probe:
    return Probe(tuple(sh_argv(DF_SCRIPT, path)), checked(f"df {path}", lambda t: parse_df(t, path)))


def du_probe(path: str) -> Probe:
    """Bytes of a snapshot with its symlinks followed (the blobs it points at)."""
    return Probe(("du", "-sLk", path), checked(f"du {path}", lambda t: int(t.split()[0]) * 1024), timeout=120)


def probe_df(conn: Connector, path: str) -> DiskUsage:
    return df_probe(path).run(conn)
