"""Ship a Hugging Face snapshot: only missing or different files, never leaving a half-done copy.

Order on the peer: `begin` removes the old completion marker and leftover part files; the source
then sends the files straight to the peer (hop.py) over several streams, each whole file written
under a part name and renamed once all its bytes arrived (hashed on the way), a large file split
in ranges written in place into its part file; `finish` checks each ranged file's sha256 and
renames it, makes the snapshot links, checks every file against the source's sha256, writes
refs/<branch> and the completion marker last. A rerun after any interruption resends only what is
not there intact.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkctl.ship.errors import RERUN, DiskFullError, ShipError
from sparkctl.ship.hop import hop_error, run_push
from sparkctl.ship.manifest import (
    Manifest,
    dest_paths,
    diff_files,
    node_argv,
    parse_op_result,
    repo_dir,
    run_op,
)
from sparkctl.ship.progress import Progress
from sparkctl.units import human_bytes

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector
    from sparkctl.ship.hop import Transfers

SPACE_MARGIN = 64 << 20
RANGE_MIN = 64 << 20  # files smaller than this are never split
ALIGN = 1 << 20


@dataclass
class WeightsResult:
    node: str
    model: str
    commit: str
    action: str  # "skipped" | "shipped" | "repaired" (nothing to send, links/marker redone)
    digest: str
    source: str = ""
    check: str = "quick"  # "quick" (size+mtime+inode cache, like rsync) | "deep" (every byte rehashed)
    bytes_sent: int = 0
    files_sent: int = 0
    files_kept: int = 0
    streams: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {"what": f"weights:{self.model}", **self.__dict__}


def plan_streams(send: dict[str, int], n: int) -> tuple[list[list[tuple[str, int | None, int]]], list[str]]:
    """Spread files over n streams, largest first onto the least loaded; a file larger than an
    even share (and RANGE_MIN) is cut into ranges. Returns (streams of (dest, offset|None, length),
    the dests sent in ranges)."""
    n = max(1, n)
    total = sum(send.values())
    share = -(-total // n)
    pieces: list[tuple[str, int | None, int]] = []
    ranged: list[str] = []
    for dest, size in sorted(send.items(), key=lambda kv: (-kv[1], kv[0])):
        if n > 1 and size >= RANGE_MIN and size > share:
            step = -(-size // min(n, -(-size // RANGE_MIN)) // ALIGN) * ALIGN
            pieces += [(dest, off, min(step, size - off)) for off in range(0, size, step)]
            ranged.append(dest)
        else:
            pieces.append((dest, None, size))
    streams: list[list[tuple[str, int | None, int]]] = [[] for _ in range(min(n, len(pieces)) or 1)]
    load = [0] * len(streams)
    for piece in sorted(pieces, key=lambda p: -p[2]):
        i = load.index(min(load))
        streams[i].append(piece)
        load[i] += piece[2]
    return streams, ranged


def identical(source: Manifest, peer_doc: dict | None) -> bool:
    """The peer's own manifest (one round trip) already equals the source's, and is marked complete."""
    if not peer_doc or not source.hashed or peer_doc.get("commit") != source.commit:
        return False
    files = {rel: (f.sha256, f.size, f.blob) for rel, f in source.files.items()}
    theirs = {rel: tuple(v) for rel, v in peer_doc.get("files", {}).items()}
    return files == theirs and not peer_doc.get("broken") and peer_doc.get("marker") == source.digest


def ship_weights(
    source: Manifest,
    src: Connector,
    peer: Connector,
    peer_hf_cache: str,
    progress: Progress,
    *,
    hop: list[str],
    transfers: Transfers,
    peer_doc: dict | None = None,
    streams: int = 1,
    deep: bool = False,
    check_space: bool = True,
    dry_run: bool = False,
) -> WeightsResult:
    """`source` may be lazy (some sha256 None): files the peer lacks are hashed while being sent."""
    assert source.commit is not None
    key = f"{peer.node}:{source.model_id}"
    check = "deep" if deep else "quick"
    result = WeightsResult(peer.node, source.model_id, source.commit, "skipped", "", src.node, check)
    skip_note = "identical, every byte rehashed" if deep else "identical by quick check (size+mtime+inode)"
    if identical(source, peer_doc):
        result.digest, result.files_kept = source.digest, len(source.files)
        progress.start(key, f"{peer.node} {source.model_id}", 0)
        progress.finish(key, skip_note)
        return result
    repo = repo_dir(peer_hf_cache, source.model_id)
    mode = ["deep"] if deep else []
    probe = run_op(peer, "probe", repo, *mode, payload={"commit": source.commit, "paths": dest_paths(source)})
    diff = diff_files(source, probe["hashes"])
    if diff.unknown:  # the peer has these: hash them on the source to compare
        hashed = run_op(src, "probe", source.repo_dir, *mode, payload={"paths": diff.unknown})["hashes"]
        source = source.with_hashes({d: v[0] for d, v in hashed.items() if v})
        diff = diff_files(source, probe["hashes"])
    result.files_kept = diff.have
    if not diff.send and source.hashed and probe.get("marker") == source.digest:
        result.digest = source.digest
        progress.start(key, f"{peer.node} {source.model_id}", 0)
        progress.finish(key, skip_note)
        return result
    free = int(probe["free"])
    if check_space and diff.bytes + SPACE_MARGIN > free:
        raise DiskFullError(
            f"not enough disk for {source.model_id}: {human_bytes(diff.bytes)} to copy, {human_bytes(free)} free "
            f"under {peer_hf_cache}",
            node=peer.node,
            fix=f"free at least {human_bytes(diff.bytes + SPACE_MARGIN - free)} there, then rerun `sparkctl ship`",
        )
    if dry_run:
        result.action = "would ship"
        result.bytes_sent, result.files_sent = diff.bytes, len(diff.send)
        return result
    t0 = time.monotonic()
    progress.start(key, f"{peer.node} {source.model_id} (from {src.node})", diff.bytes)
    run_op(peer, "begin", repo, source.commit)
    written, ranged = {}, {}
    if diff.send:
        plan, ranged_dests = plan_streams(diff.send, streams)
        result.streams = len(plan)
        sent = _push(src, peer.node, source, repo, plan, ranged_dests, hop, transfers, progress, key)
        source = source.with_hashes({**sent["hashes"], **sent["ranged"]})
        written, ranged = sent["written"], sent["ranged"]
        result.bytes_sent, result.files_sent = sent["bytes"], len(diff.send)
    plan_doc = {
        "commit": source.commit,
        "revision": source.revision,
        "files": {rel: [f.sha256, f.size, f.blob] for rel, f in source.files.items()},
    }
    done = run_op(peer, "finish", repo, payload={"plan": plan_doc, "written": written, "ranged": ranged})
    if not done["ok"]:
        raise ShipError(
            f"{source.model_id} on the node does not match the source after the copy: "
            + ", ".join(done["mismatch"][:3]),
            node=peer.node,
            fix=RERUN,
        )
    result.action = "shipped" if diff.send else "repaired"
    result.digest = done["digest"]
    result.seconds = time.monotonic() - t0
    progress.finish(key, f"verified ({diff.have} file(s) already there)")
    return result


def _push(src: Connector, peer: str, source: Manifest, repo: str, plan: list, ranged: list[str],
          hop: list[str], transfers: Transfers, progress: Progress, key: str) -> dict:  # fmt: skip
    """The source sends; returns {hashes, ranged, written, bytes}, raising the peer's own error."""
    known = {f.dest(rel, source.commit or ""): f.sha256 for rel, f in source.files.items()}
    req = {"repo": source.repo_dir, "streams": plan, "hop": hop, "recv": node_argv("recv", repo),
           "ranged": {d: known.get(d) for d in ranged}}  # fmt: skip
    res = run_push(src, "push-weights", req, transfers, progress, key)
    written: dict[str, str] = {}
    host = hop[-2].rpartition("@")[2] if hop else peer
    for stream in res["streams"]:
        err = hop_error(src.node, peer, host, stream["rc"], stream["err"])
        if err is not None:
            raise err
        if stream["rc"] != 0:
            _raise_receiver_error(_error_doc(stream["err"]), source, peer, res["errors"], src.node)
        written.update(_error_doc(stream["out"]).get("written", {}))
    if res["errors"]:
        raise ShipError(f"reading {source.model_id} on the source failed: {res['errors'][0]}", node=src.node, fix=RERUN)
    return {**res, "written": written}


def _raise_receiver_error(err: dict, source: Manifest, peer: str, send_errors: list[str], src: str) -> None:
    if err.get("error") == "enospc":
        raise DiskFullError(
            f"disk full while copying {source.model_id} ({err.get('message', '')}); the partial file was removed",
            node=peer,
            fix="free disk under the HF cache, then rerun `sparkctl ship`",
        )
    if err.get("error") == "unsafe":
        raise ShipError(f"refused to write {source.model_id}: {err.get('message')}", node=peer,
                        fix="the source's snapshot has a name outside the HF cache layout: re-download it there")  # fmt: skip
    if err.get("error") == "truncated" and send_errors:
        raise ShipError(f"reading {source.model_id} on the source failed: {send_errors[0]}", node=src, fix=RERUN)
    raise ShipError(
        f"receiving {source.model_id} failed: {err.get('message') or err.get('raw') or 'no report'}",
        node=peer,
        fix=RERUN,
    )


def _error_doc(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            return doc
    return {"raw": text.strip().splitlines()[-1] if text.strip() else ""}


__all__ = ["WeightsResult", "identical", "parse_op_result", "plan_streams", "ship_weights"]
