"""After `ship` on unified-memory nodes: the page cache the transfer left, said, and dropped on request.

On a GB10 the page cache a big weights sync leaves behind (the peer wrote every byte; the source
read every byte) counts as available memory, but not all of it can be handed to the GPU while the
model loads: users measured GiB lost at load (docs/memory.md). `ship` says so for every unified
node that moved more than `NOTE_BYTES`; `ship --drop-caches` drops it (root on the node, or
passwordless sudo), else prints the exact command to run there.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkctl.connectors.pool import NodePool
from sparkctl.fanout import fan_out
from sparkctl.profile.memory import unified_nodes
from sparkctl.profile.schema import Profile
from sparkctl.units import human_bytes

NOTE_BYTES = 2 << 30  # below this the cache is not worth a word
DROP_CACHES = "sync; echo 3 | sudo tee /proc/sys/vm/drop_caches"
# As root: drop it; else sudo without a password; else say so (exit 3). Prints MemFree before/after (kB).
_DROP_SH = r"""free() { awk '/^MemFree:/ {print $2}' /proc/meminfo; }
before=$(free)
if [ "$(id -u)" = 0 ]; then sync && echo 3 > /proc/sys/vm/drop_caches || exit 4
elif sudo -n true 2>/dev/null; then sync && echo 3 | sudo -n tee /proc/sys/vm/drop_caches >/dev/null || exit 4
else exit 3; fi
echo "$before $(free)"
"""


@dataclass
class CacheNote:
    node: str
    moved: int  # bytes the node wrote (a peer) or read (the source) in this ship
    dropped: bool = False
    free_before: int | None = None
    free_after: int | None = None
    error: str | None = None

    def line(self) -> str:
        if self.dropped:
            return (
                f"{self.node}: page cache dropped (MemFree {human_bytes(self.free_before or 0)} -> "
                f"{human_bytes(self.free_after or 0)})"
            )
        head = (
            f"{self.node}: {human_bytes(self.moved)} moved through the page cache on unified memory; "
            "a GB10 cannot give all of it to the GPU at load"
        )
        if self.error:
            return f"{head}; not dropped ({self.error}): run on {self.node}: `{DROP_CACHES}`"
        return f"{head}: `sparkctl ship --drop-caches` drops it, or run on {self.node}: `{DROP_CACHES}`"

    def to_json(self) -> dict:
        return dict(self.__dict__)


def moved_by_node(report) -> dict[str, int]:  # ShipReport
    """Bytes each node moved in this ship: written by each peer, read by each source."""
    out: dict[str, int] = {}
    for r in report.results:
        if r.action in ("skipped", "would ship") or not r.bytes_sent:
            continue
        for node in (r.node, r.source):
            if node:
                out[node] = out.get(node, 0) + r.bytes_sent
    return out


def notes(profile: Profile, report, threshold: int = NOTE_BYTES) -> list[CacheNote]:  # ShipReport
    moved = moved_by_node(report)
    return [CacheNote(n, moved[n]) for n in unified_nodes(profile, list(moved)) if moved[n] >= threshold]


def drop(pool: NodePool, found: list[CacheNote]) -> list[CacheNote]:
    """Drop the page cache on each node of `found`, in parallel; each note says what happened."""

    by_node = {n.node: n for n in found}

    def one(node: str) -> CacheNote:
        note = by_node[node]
        res = pool.get(node).run(["sh", "-c", _DROP_SH], timeout=300)
        if res.rc == 3:
            note.error = "not root, and sudo asks for a password"
        elif res.rc != 0:
            note.error = (res.stderr.strip().splitlines() or [f"exit {res.rc}"])[-1]
        else:
            before, after = (int(x) * 1024 for x in res.stdout.split()[:2])
            note.dropped, note.free_before, note.free_after = True, before, after
        return note

    return list(fan_out(list(by_node), one).values_or_raise().values())
