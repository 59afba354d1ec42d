"""The source's side of a weights copy, as seen from sparkctl: each peer, what it needs and its
result; one `push-weights` on the source through the chain of peers, and what each peer's
receivers answered (files written with their sha256, the snapshot finished by the first
stream's receiver, or the error to report)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkctl.errors import SparkctlError
from sparkctl.node.pack import node_argv, node_script
from sparkctl.ship.errors import RERUN, DiskFullError, ShipError
from sparkctl.ship.hop import chain_entry, hop_error, run_push
from sparkctl.ship.progress import FanOut, Progress

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector
    from sparkctl.remote.manifest import Manifest, WeightsDiff
    from sparkctl.ship.hop import Transfers


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


@dataclass
class WeightsPeer:
    """A peer of one model: its connector, HF cache path, the ssh argv that reaches it from another
    node, and its own manifest doc from the `state` round trip (None: not gathered)."""

    conn: Connector
    hf_cache: str
    hop: list[str]
    doc: dict | None = None


@dataclass
class WeightsNeed:
    peer: WeightsPeer
    repo: str
    diff: WeightsDiff
    result: WeightsResult
    probe: dict  # the peer's probe: hashes by destination, marker, free space


def plan_doc(source: Manifest) -> dict:
    """What `finish` checks the peer's snapshot against (sha256 None: not known yet to sparkctl,
    filled in on the source from the hashes computed while sending)."""
    return {
        "commit": source.commit,
        "revision": source.revision,
        "refs": list(source.refs),
        "files": {rel: [f.sha256, f.size, f.blob] for rel, f in source.files.items()},
    }


def push_weights(
    src: Connector,
    source: Manifest,
    senders: list[WeightsNeed],
    plan: list,
    ranged: list[str],
    transfers: Transfers,
    progress: Progress,
) -> dict:
    """The source sends through the chain of peers; per peer {written, finish} or its error."""
    known = {f.dest(rel, source.commit or ""): f.sha256 for rel, f in source.files.items()}
    chain = [
        chain_entry(
            n.peer.conn.node,
            n.peer.hop,
            node_argv("recv", n.repo, source.commit or "", n.peer.conn.node, *_verify(n)),
        )
        for n in senders
    ]
    req = {
        "repo": source.repo_dir,
        "streams": plan,
        "chain": chain,
        "prog": node_script(),
        "ranged": {d: known.get(d) for d in ranged},
        "finish": plan_doc(source),
    }
    fan = FanOut(progress, [n.peer.conn.node for n in senders], source.model_id)
    res = run_push(src, "push-weights", req, transfers, fan, f"{src.node}:{source.model_id}")
    peers: dict[str, dict | SparkctlError] = {}
    for n in senders:
        node, got = n.peer.conn.node, {"written": {}, "finish": None}
        try:
            for stream in res["streams"]:
                doc = _stream_result(stream, n, source, src.node, res["errors"])
                got["written"].update(doc.get("written", {}))
                got["finish"] = got["finish"] or doc.get("finish")
        except SparkctlError as exc:
            peers[node] = exc
            continue
        peers[node] = got
    if res["errors"] and not any(isinstance(v, SparkctlError) for v in peers.values()):
        raise ShipError(
            f"reading {source.model_id} on the source failed: {res['errors'][0]}", node=src.node, fix=RERUN
        )
    return {**res, "peers": peers}


def _verify(need: WeightsNeed) -> list[str]:
    """`ship --verify`: the receiver hashes every byte on arrival too (end to end, its own sha256
    recorded) instead of taking the source's from the stream (node/recv.py)."""
    return ["verify"] if need.result.check == "deep" else []


def _stream_result(
    stream: dict, need: WeightsNeed, source: Manifest, src: str, send_errors: list[str]
) -> dict:
    node = need.peer.conn.node
    got = stream.get(node)
    if got is None:
        raise ShipError(
            f"{source.model_id} never reached this node: a node before it in the pipeline failed",
            node=node,
            fix=RERUN,
        )
    host = need.peer.hop[-2].rpartition("@")[2] if need.peer.hop else node
    err = hop_error(src, node, host, got["rc"], got["err"])
    if err is not None:
        raise err
    if got["rc"] != 0:
        _raise_receiver_error(_error_doc(got["err"]), source, node, send_errors, src)
    return _error_doc(got["out"])


def _raise_receiver_error(err: dict, source: Manifest, peer: str, send_errors: list[str], src: str) -> None:
    if err.get("error") == "enospc":
        raise DiskFullError(
            f"disk full while copying {source.model_id} ({err.get('message', '')}); the partial file was removed",
            node=peer,
            fix="free disk under the HF cache, then rerun `sparkctl ship`",
        )
    if err.get("error") == "unsafe":
        raise ShipError(
            f"refused to write {source.model_id}: {err.get('message')}",
            node=peer,
            fix="the source's snapshot has a name outside the HF cache layout: re-download it there",
        )
    if err.get("error") == "truncated" and send_errors:
        raise ShipError(
            f"reading {source.model_id} on the source failed: {send_errors[0]}", node=src, fix=RERUN
        )
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
