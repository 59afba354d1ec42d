"""Ship a Hugging Face snapshot: only missing or different files, never leaving a half-done copy.

Order on the peer: the old completion marker is removed first; each file is written under a
temporary name and renamed once all its bytes arrived (its sha256 computed on the way and cached);
then the snapshot links, a check of every file's sha256 against the source manifest (files
written now were hashed as they arrived; files already there use the node's hash cache, keyed by
size/mtime/inode), refs/<branch>, and the completion marker last. A rerun after any interruption resends only what is not there intact.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkctl.errors import SparkctlError
from sparkctl.facts.hfcache import repo_dir
from sparkctl.ship._node import frame
from sparkctl.ship.errors import RERUN, DiskFullError, ShipError
from sparkctl.ship.manifest import Manifest, dest_paths, diff_files, node_argv, run_op
from sparkctl.ship.progress import Progress
from sparkctl.ship.pump import pump, read_chunks
from sparkctl.units import human_bytes

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector

CHUNK = 1 << 20
SPACE_MARGIN = 64 << 20


@dataclass
class WeightsResult:
    node: str
    model: str
    commit: str
    action: str  # "skipped" | "shipped" | "repaired" (nothing to send, links/marker redone)
    digest: str
    bytes_sent: int = 0
    files_sent: int = 0
    files_kept: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {"what": f"weights:{self.model}", **self.__dict__}


def ship_weights(
    source: Manifest,
    src: Connector,
    peer: Connector,
    peer_hf_cache: str,
    progress: Progress,
    *,
    check_space: bool = True,
    dry_run: bool = False,
) -> WeightsResult:
    """`source` may be lazy (some sha256 None): files the peer lacks are hashed while being sent."""
    assert source.commit is not None
    key = f"{peer.node}:{source.model_id}"
    repo = repo_dir(peer_hf_cache, source.model_id)
    probe = run_op(peer, "probe", repo, payload={"commit": source.commit, "paths": dest_paths(source)})
    diff = diff_files(source, probe["hashes"])
    if diff.unknown:  # the peer has these: hash them on the source to compare
        hashed = run_op(src, "probe", source.repo_dir, payload={"paths": diff.unknown})["hashes"]
        source = source.with_hashes({d: v[0] for d, v in hashed.items() if v})
        diff = diff_files(source, probe["hashes"])
    result = WeightsResult(peer.node, source.model_id, source.commit, "skipped", "", files_kept=diff.have)
    if not diff.send and source.hashed and probe.get("marker") == source.digest:
        result.digest = source.digest
        progress.start(key, f"{peer.node} {source.model_id}", 0)
        progress.finish(key, "identical, skipped")
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
    progress.start(key, f"{peer.node} {source.model_id}", diff.bytes)
    plan = {
        "commit": source.commit,
        "revision": source.revision,
        "files": {rel: [f.sha256, f.size, f.blob] for rel, f in source.files.items()},
    }
    done = _transfer(src, source, peer, repo, plan, sorted(diff.send), progress, key)
    if not done["ok"]:
        raise ShipError(
            f"{source.model_id} on the node does not match the source after the copy: "
            + ", ".join(done["mismatch"][:3]),
            node=peer.node,
            fix=RERUN,
        )
    result.action = "shipped" if diff.send else "repaired"
    result.digest = done["digest"]
    result.bytes_sent = int(done["bytes"])
    result.files_sent = int(done["files_written"])
    result.seconds = time.monotonic() - t0
    progress.finish(key, f"verified ({diff.have} file(s) already there)")
    return result


def _transfer(
    src: Connector,
    source: Manifest,
    peer: Connector,
    repo: str,
    plan: dict,
    paths: list[str],
    progress: Progress,
    key: str,
) -> dict:
    """Plan line, then the source's `send` stream (if any) -> this process -> peer `recv`.

    Returns the receiver's report (verification, digest, bytes)."""
    sender = src.popen(node_argv("send", source.repo_dir)) if paths else None
    receiver = None
    moved = 0
    try:
        if sender is not None:
            sender.stdin.write(json.dumps({"paths": paths}).encode())
            sender.close_stdin()
        receiver = peer.popen(node_argv("recv", repo))
        receiver.stdin.write(frame({"plan": plan}))
        if sender is None:
            receiver.stdin.write(frame({"end": True, "hashes": {}}))  # nothing to copy
        else:

            def count(n: int) -> None:
                nonlocal moved
                moved += n
                progress.advance(key, n)

            pump(read_chunks(sender.stdout.read, CHUNK), receiver.stdin.write, count)
        receiver.close_stdin()
        rc = receiver.wait()
        src_rc = sender.wait() if sender is not None else 0
        out = receiver.stdout.read()
    except SparkctlError:
        _kill(sender, receiver)
        raise
    except Exception as exc:  # noqa: BLE001 - socket/SSH errors all mean "the connection broke"
        # The receiver may have stopped on purpose (disk full): its own report wins if it has one.
        err = _exit_report(receiver)
        _kill(sender, receiver)
        if err.get("error"):
            _raise_receiver_error(err, source, peer)
        raise ShipError(
            f"connection lost while copying {source.model_id} after {human_bytes(moved)}: {exc or type(exc).__name__}; "
            "files that arrived whole are kept",
            node=peer.node,
            fix=RERUN,
        ) from None
    except BaseException:
        _kill(sender, receiver)
        raise
    if rc != 0:
        err = _error_doc(receiver.read_stderr())
        # A stream cut short on the receiving side is the source's failure when the sender failed.
        if not (err.get("error") == "truncated" and src_rc != 0 and sender is not None):
            _raise_receiver_error(err or {"raw": f"exit {rc}"}, source, peer)
    if src_rc != 0 and sender is not None:
        raise ShipError(
            f"reading {source.model_id} on the source failed: {sender.read_stderr().strip()[-300:]}",
            node=src.node,
            fix=RERUN,
        )
    try:
        return json.loads(out.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ShipError(f"receiving {source.model_id} printed no report", node=peer.node, fix=RERUN) from None


def _exit_report(proc) -> dict:  # noqa: ANN001 - connector process
    if proc is None:
        return {}
    try:
        proc.wait(timeout=5)
        return _error_doc(proc.read_stderr())
    except Exception:  # noqa: BLE001 - the link itself is gone: no report to read
        return {}


def _raise_receiver_error(err: dict, source: Manifest, peer: Connector) -> None:
    if err.get("error") == "enospc":
        raise DiskFullError(
            f"disk full while copying {source.model_id} ({err.get('message', '')}); "
            "the partial file was removed",
            node=peer.node,
            fix="free disk under the HF cache, then rerun `sparkctl ship`",
        )
    raise ShipError(
        f"receiving {source.model_id} failed: {err.get('message') or err.get('raw') or 'no report'}",
        node=peer.node,
        fix=RERUN,
    )


def _kill(*procs) -> None:  # noqa: ANN002 - connector processes
    for proc in procs:
        if proc is not None:
            with contextlib.suppress(Exception):  # best effort on an already broken link
                proc.kill()


def _error_doc(stderr: str) -> dict:
    for line in reversed(stderr.strip().splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            return doc
    return {"raw": stderr.strip().splitlines()[-1] if stderr.strip() else ""}
