"""Ship a Hugging Face snapshot: only missing or different files, never leaving a half-done copy.

Order on the peer: the source sends the files straight to the peer (hop.py) over several streams,
each receiver first removing the old completion marker, each whole file written
under a part name and renamed once all its bytes arrived (hashed on the way), a large file split
in ranges written in place into its part file; `finish` checks each ranged file's sha256 and
renames it (by the sha256 of each range, sent and received, when they tile the file: no second
read), makes the snapshot links, checks every file against the source's sha256, removes part
files left by an interrupted run, writes the source's refs/<branch> to the commit and the completion
marker last. A rerun after any interruption resends only what is
not there intact.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sparkctl.errors import SparkctlError
from sparkctl.facts.hfcache import repo_dir
from sparkctl.fanout import fan_out
from sparkctl.remote.manifest import Manifest, dest_paths, diff_files
from sparkctl.remote.ops import parse_op_result, run_op
from sparkctl.ship.errors import RERUN, DiskFullError, ShipError
from sparkctl.ship.progress import Progress
from sparkctl.ship.weights_push import WeightsNeed, WeightsPeer, WeightsResult, plan_doc, push_weights
from sparkctl.units import human_bytes

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector
    from sparkctl.ship.hop import Transfers

SPACE_MARGIN = 64 << 20
RANGE_MIN = 64 << 20  # files smaller than this are never split
ALIGN = 1 << 20


BALANCED = 1.15  # whole files only, when their best spread is within 15 % of an even share


def plan_streams(send: dict[str, int], n: int) -> tuple[list[list[tuple[str, int | None, int]]], list[str]]:
    """Spread files over n streams, largest first onto the least loaded. Whole files when that
    spread is within BALANCED of an even share: each file is then read once on the source, hashed
    on its way, and once on the peer as it is written. Otherwise a file larger than an even share
    (and RANGE_MIN) is cut into ranges, each hashed on both ends (the source, when the file is not
    hashed yet, reads it once more for its whole sha256). Returns
    (streams of (dest, offset|None, length), the dests sent in ranges)."""
    n = max(1, n)
    total = sum(send.values())
    share = -(-total // n)
    files = sorted(send.items(), key=lambda kv: (-kv[1], kv[0]))
    whole, load = _spread([(dest, None, size) for dest, size in files], n)
    if n == 1 or max(load) <= BALANCED * share:
        return whole, []
    pieces: list[tuple[str, int | None, int]] = []
    ranged: list[str] = []
    for dest, size in files:
        if size >= RANGE_MIN and size > share:
            step = -(-size // min(n, -(-size // RANGE_MIN)) // ALIGN) * ALIGN
            pieces += [(dest, off, min(step, size - off)) for off in range(0, size, step)]
            ranged.append(dest)
        else:
            pieces.append((dest, None, size))
    return _spread(pieces, n)[0], ranged


def _spread(
    pieces: list[tuple[str, int | None, int]], n: int
) -> tuple[list[list[tuple[str, int | None, int]]], list[int]]:
    """Longest first onto the least loaded stream: (streams, bytes per stream)."""
    streams: list[list[tuple[str, int | None, int]]] = [[] for _ in range(min(n, len(pieces)) or 1)]
    load = [0] * len(streams)
    for piece in sorted(pieces, key=lambda p: -p[2]):
        i = load.index(min(load))
        streams[i].append(piece)
        load[i] += piece[2]
    return streams, load


def identical(source: Manifest, peer_doc: dict | None) -> bool:
    """The peer's own manifest (one round trip) already equals the source's, and is marked complete."""
    if not peer_doc or not source.hashed or peer_doc.get("commit") != source.commit:
        return False
    files = {rel: (f.sha256, f.size, f.blob) for rel, f in source.files.items()}
    theirs = {rel: tuple(v) for rel, v in peer_doc.get("files", {}).items()}
    same_refs = set(source.refs) <= set(peer_doc.get("refs") or ())
    return (
        files == theirs
        and not peer_doc.get("broken")
        and peer_doc.get("marker") == source.digest
        and same_refs
    )


def ship_weights(
    source: Manifest,
    src: Connector,
    peers: list[WeightsPeer],
    progress: Progress,
    *,
    transfers: Transfers,
    streams: int = 1,
    deep: bool = False,
    check_space: bool = True,
    dry_run: bool = False,
) -> dict[str, WeightsResult | SparkctlError]:
    """Every peer that lacks files of the snapshot gets them in one pass from the source (several
    peers: a pipeline through them, each byte leaving the source once). `source` may be lazy (some
    sha256 None): files the peers lack are hashed while being sent."""
    out: dict[str, WeightsResult | SparkctlError] = {}
    needs: list[WeightsNeed] = []
    for peer, outcome in fan_out(
        [p.conn.node for p in peers],
        lambda n: _compare(source, next(p for p in peers if p.conn.node == n), deep),
        cancel=transfers.cancel,
    ).items():
        if not outcome.ok:
            out[peer] = (
                outcome.error
                if isinstance(outcome.error, SparkctlError)
                else ShipError(str(outcome.error), node=peer)
            )
        elif isinstance(outcome.value, WeightsResult):
            out[peer] = outcome.value
        else:
            needs.append(outcome.value)
    unknown = sorted({d for n in needs for d in n.diff.unknown})
    if unknown:  # peers have these: hash them on the source to compare
        mode = ["deep"] if deep else []
        hashed = run_op(src, "probe", source.repo_dir, *mode, payload={"paths": unknown})["hashes"]
        source = source.with_hashes({d: v[0] for d, v in hashed.items() if v})
    for need in needs:
        out.update(_settle_need(source, need, check_space, dry_run, progress))
    todo = [n for n in needs if n.peer.conn.node not in out]
    if todo:
        out.update(_copy(source, src, todo, progress, transfers, streams))
    return out


def _compare(source: Manifest, peer: WeightsPeer, deep: bool) -> WeightsResult | WeightsNeed:
    """Skip when the peer's own manifest already equals the source's (no extra round trip); else
    probe the peer's files by destination (hashing what it has) and diff."""
    assert source.commit is not None
    node = peer.conn.node
    result = WeightsResult(
        node, source.model_id, source.commit, "skipped", "", source.node, "deep" if deep else "quick"
    )
    if identical(source, peer.doc):
        result.digest, result.files_kept = source.digest, len(source.files)
        return result
    repo = repo_dir(peer.hf_cache, source.model_id)
    if peer.doc is not None and peer.doc.get("exists") is False and "free" in peer.doc:
        # Nothing of this repo on the peer (its `state` says so): everything goes, no probe.
        probe = {"hashes": dict.fromkeys(dest_paths(source)), "free": peer.doc["free"], "marker": None}
    else:
        mode = ["deep"] if deep else []
        probe = run_op(
            peer.conn, "probe", repo, *mode, payload={"commit": source.commit, "paths": dest_paths(source)}
        )
    return WeightsNeed(peer, repo, diff_files(source, probe["hashes"]), result, probe)


def _settle_need(
    source: Manifest, need: WeightsNeed, check_space: bool, dry_run: bool, progress: Progress
) -> dict[str, WeightsResult | SparkctlError]:
    """Final diff of one peer; a result when nothing moves (identical, dry run) or an error (disk)."""
    node, probe = need.peer.conn.node, need.probe
    diff = need.diff = diff_files(source, probe["hashes"])  # again: the source may have hashed more
    need.result.files_kept = diff.have
    key = f"{node}:{source.model_id}"
    refs = set(source.refs) <= set(probe.get("refs") or ())  # else `finish` adds them ("repaired")
    if not diff.send and source.hashed and probe.get("marker") == source.digest and refs:
        need.result.digest = source.digest
        progress.start(key, f"{node} {source.model_id}", 0)
        progress.finish(key, _skip_note(need.result.check))
        return {node: need.result}
    free = int(probe["free"])
    if check_space and diff.bytes + SPACE_MARGIN > free:
        return {
            node: DiskFullError(
                f"not enough disk for {source.model_id}: {human_bytes(diff.bytes)} to copy, {human_bytes(free)} free "
                f"under {need.peer.hf_cache}",
                node=node,
                fix=f"free at least {human_bytes(diff.bytes + SPACE_MARGIN - free)} there, then rerun `sparkctl ship`",
            )
        }
    if dry_run:
        need.result.action = "would ship"
        need.result.bytes_sent, need.result.files_sent = diff.bytes, len(diff.send)
        return {node: need.result}
    return {}


def _skip_note(check: str) -> str:
    return (
        "identical, every byte rehashed" if check == "deep" else "identical by quick check (size+mtime+inode)"
    )


def _copy(
    source: Manifest,
    src: Connector,
    todo: list[WeightsNeed],
    progress: Progress,
    transfers: Transfers,
    streams: int,
) -> dict[str, WeightsResult | SparkctlError]:
    """One push through all peers that need bytes (each receiver first drops its completion
    marker), then finish on every peer."""
    t0 = time.monotonic()
    for n in todo:
        progress.start(
            f"{n.peer.conn.node}:{source.model_id}",
            f"{n.peer.conn.node} {source.model_id} (from {src.node})",
            n.diff.bytes,
        )
    out: dict[str, WeightsResult | SparkctlError] = {}
    by_node = {n.peer.conn.node: n for n in todo}
    senders = [n for n in todo if n.diff.send]
    arrived: dict[str, dict] = {n.peer.conn.node: {"written": {}, "ranged": {}} for n in todo}
    if senders:
        send = {d: s for n in senders for d, s in n.diff.send.items()}
        plan, ranged_dests = plan_streams(send, streams)
        sent = push_weights(src, source, senders, plan, ranged_dests, transfers, progress)
        source = source.with_hashes({**sent["hashes"], **sent["ranged"]})
        for n in senders:
            node = n.peer.conn.node
            if isinstance(sent["peers"][node], SparkctlError):
                out[node] = sent["peers"][node]
            else:
                arrived[node] = {**sent["peers"][node], "ranged": sent["ranged"]}
                n.result.bytes_sent, n.result.files_sent, n.result.streams = (
                    sent["bytes"],
                    len(n.diff.send),
                    len(plan),
                )
    todo = [n for n in todo if n.peer.conn.node not in out]
    done = fan_out(
        [n.peer.conn.node for n in todo],
        lambda k: _finish(source, by_node[k], arrived[k], progress, t0),
        cancel=transfers.cancel,
    )
    for o in done.values():
        out[o.key] = o.value if o.ok else o.as_error()
    return out


def _finish(
    source: Manifest, need: WeightsNeed, arrived: dict, progress: Progress, t0: float
) -> WeightsResult:
    """The peer's `finish` result: done by its first stream's receiver (see node/recv.op_recv), else
    (nothing sent, or an older peer answer) one round trip here."""
    node = need.peer.conn.node
    done = arrived.get("finish")
    if done is None:
        payload = {"plan": plan_doc(source), "written": arrived["written"], "ranged": arrived["ranged"]}
        done = run_op(need.peer.conn, "finish", need.repo, payload=payload)
    if not done["ok"]:
        raise ShipError(
            f"{source.model_id} on the node does not match the source after the copy: "
            + ", ".join(done["mismatch"][:3]),
            node=node,
            fix=RERUN,
        )
    result = need.result
    result.action = "shipped" if need.diff.send else "repaired"
    result.digest = done["digest"]
    result.seconds = time.monotonic() - t0
    progress.finish(f"{node}:{source.model_id}", f"verified ({need.diff.have} file(s) already there)")
    return result


__all__ = ["WeightsPeer", "WeightsResult", "identical", "parse_op_result", "plan_streams", "ship_weights"]
