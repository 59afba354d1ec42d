"""Ship a Docker image: skip equal IDs, else stream only the layers the peer lacks, verify the ID.

Data path, all on the nodes: the source runs `docker save` and pipes it (minus the layers the peer
already has, dropped by LayerFilter running there) into `ssh PEER docker load -q` (see hop.py).
When nothing is dropped the kernel moves the bytes save -> ssh, exactly like the recipe's pipe.
Image IDs, layers and free space come from each node's one `state` round trip.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkctl.errors import SparkctlError
from sparkctl.node.pack import load_argv, node_script
from sparkctl.node.tarfilter import chain_ids
from sparkctl.ship.errors import RERUN, DiskFullError, LoadRefusedError, ShipError, SourceMissingError
from sparkctl.ship.hop import chain_entry, hop_error, peer_address, run_push
from sparkctl.ship.progress import FanOut, Progress
from sparkctl.units import human_bytes

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector
    from sparkctl.ship.hop import Transfers

# docker load (Docker <= 24) unpacks the stream into its data root's tmp/ and then into layers.
LOAD_SPACE_FACTOR = 2
SPACE_MARGIN = 256 << 20


@dataclass(frozen=True)
class SourceImage:
    node: str
    ref: str
    id: str
    layers: list[str]  # diff ids, bottom first
    layer_sizes: list[int]  # best estimate of each layer's unpacked size


@dataclass(frozen=True)
class Codec:
    """How the stream crosses the link: `name` "zstd" (level 1) with `threads` on the source."""

    name: str
    threads: int = 1


@dataclass
class ImageResult:
    node: str
    action: str  # "skipped" | "shipped" | "would ship"
    image_id: str
    source: str = ""
    bytes_sent: int = 0
    bytes_skipped: int = 0
    layers_sent: int = 0
    layers_skipped: int = 0
    seconds: float = 0.0
    codec: str | None = None  # "zstd" when the stream crossed the link compressed
    wire_bytes: int | None = None  # what crossed the source's link (compressed), when known

    def to_json(self) -> dict:
        return {"what": "image", **self.__dict__}


def source_image(node: str, ref: str, state: dict) -> SourceImage:
    layers = list(state["layers"])
    return SourceImage(node, ref, state["id"], layers, _layer_sizes(state.get("history") or [], len(layers)))


def _layer_sizes(history: list[int], n: int) -> list[int]:
    """Layer sizes from history (bottom first). Zero-size entries are usually metadata-only steps,
    so the non-zero ones are matched to the top layers: an over- rather than under-estimate."""
    nonzero = [s for s in history if s > 0]
    if len(nonzero) >= n:
        return nonzero[-n:]
    return [0] * (n - len(nonzero)) + nonzero


def peer_prefix(chains: list[list[str]], layers: list[str]) -> int:
    """How many bottom layers the peer already has: the engine reuses a layer by chain id, so the
    longest prefix of our chain list shared with some image on the peer."""
    want = chain_ids(layers)
    best = 0
    for have in chains:
        k = 0
        while k < min(len(have), len(want)) and have[k] == want[k]:
            k += 1
        best = max(best, k)
    return best


def peer_image_id(conn: Connector, ref: str) -> str | None:
    res = conn.run(["docker", "image", "inspect", "--format", "{{.Id}}", "--", ref], timeout=60)
    return res.stdout.strip() if res.ok else None


@dataclass
class Peer:
    """A peer of one item: its connector, its `state` (image part or a model's manifest doc) and the
    ssh argv that reaches it from another node."""

    conn: Connector
    state: dict
    hop: list[str]


def _space_error(peer: str, need: int, free: int) -> DiskFullError:
    return DiskFullError(
        f"not enough disk for the image: loading {human_bytes(need)} of layers needs about "
        f"{human_bytes(need * LOAD_SPACE_FACTOR + SPACE_MARGIN)} free in the Docker data root, {human_bytes(free)} free",
        node=peer,
        fix="free disk on the node (`docker system prune`, old images), then rerun `sparkctl ship`",
    )


def ship_image(
    src: SourceImage,
    src_conn: Connector,
    peers: list[Peer],
    transfers: Transfers,
    progress: Progress,
    *,
    check_space: bool = True,
    dry_run: bool = False,
    codec: Codec | None = None,
) -> dict[str, ImageResult | SparkctlError]:
    """One `docker save` on the source, piped through every peer that lacks the image (a pipeline
    when there are several), minus the bottom layers all of them already have; compressed on the
    link with `codec` (every peer decompresses what it loads and relays the compressed bytes)."""
    out: dict[str, ImageResult | SparkctlError] = {}
    todo: list[tuple[Peer, int]] = []
    for p in peers:
        key = f"{p.conn.node}:image"
        if p.state.get("id") == src.id:
            progress.start(key, f"{p.conn.node} image", 0)
            progress.finish(key, "same image ID, skipped")
            out[p.conn.node] = ImageResult(
                p.conn.node, "skipped", src.id, src.node, layers_skipped=len(src.layers)
            )
            continue
        k = peer_prefix(p.state.get("chains") or [], src.layers)
        need, free = sum(src.layer_sizes[k:]), p.state.get("free")
        if check_space and free is not None and free < need * LOAD_SPACE_FACTOR + SPACE_MARGIN:
            out[p.conn.node] = _space_error(p.conn.node, need, free)
        elif dry_run:
            out[p.conn.node] = ImageResult(
                p.conn.node,
                "would ship",
                src.id,
                src.node,
                bytes_sent=need,
                bytes_skipped=sum(src.layer_sizes[:k]),
                layers_sent=len(src.layers) - k,
                layers_skipped=k,
            )
        else:
            todo.append((p, k))
    if todo:
        out.update(_load_all(src, src_conn, todo, transfers, progress, codec))
    return out


def _load_all(
    src: SourceImage,
    src_conn: Connector,
    todo: list[tuple[Peer, int]],
    transfers: Transfers,
    progress: Progress,
    codec: Codec | None,
) -> dict[str, ImageResult | SparkctlError]:
    k = min(k for _p, k in todo)
    need = sum(src.layer_sizes[k:])
    key = ",".join(p.conn.node for p, _k in todo) + ":image"
    for p, _k in todo:
        progress.start(f"{p.conn.node}:image", f"{p.conn.node} image (from {src.node})", need or None)
    t0 = time.monotonic()
    name = codec.name if codec else None
    chain = [chain_entry(p.conn.node, p.hop, load_argv(name)) for p, _k in todo]
    req = {
        "ref": src.ref,
        "diff_ids": src.layers,
        "skip": list(range(k)),
        "chain": chain,
        "prog": node_script(),
        "codec": name,
        "threads": codec.threads if codec else 1,
    }
    fan = FanOut(progress, [p.conn.node for p, _k in todo], "image")
    res = run_push(src_conn, "push-image", req, transfers, fan, key)
    refused = [
        r for r in res["peers"].values() if r["rc"] not in (0, 255) and "no space" not in r["err"].lower()
    ]
    if k and refused and res["save_rc"] == 0:
        # An engine that wants every layer file (e.g. a containerd image store) refused the filtered
        # stream: send it whole once. A broken link or a failed `docker save` is not retried this way.
        res = run_push(src_conn, "push-image", {**req, "skip": []}, transfers, fan, key)
    out: dict[str, ImageResult | SparkctlError] = {}
    for p, _k in todo:
        try:
            _check(res, src, p, retryable=False)
            got = peer_image_id(p.conn, src.ref)
            if got != src.id:
                raise ShipError(
                    f"after loading, {src.ref} on the peer is {got and got[:19]}, expected {src.id[:19]}",
                    node=p.conn.node,
                    fix=RERUN,
                )
        except SparkctlError as exc:
            out[p.conn.node] = exc
            continue
        skipped = res["skipped_layers"]
        out[p.conn.node] = ImageResult(
            p.conn.node,
            "shipped",
            src.id,
            src.node,
            bytes_sent=res["sent"] if res["sent"] is not None else need,
            bytes_skipped=res["skipped_bytes"],
            layers_sent=len(src.layers) - len(skipped),
            layers_skipped=len(skipped),
            seconds=time.monotonic() - t0,
            codec=res.get("codec"),
            wire_bytes=res.get("wire"),
        )
        progress.finish(f"{p.conn.node}:image", f"loaded, {len(skipped)} layer(s) already there")
    return out


def _check(res: dict, src: SourceImage, peer: Peer, *, retryable: bool) -> None:
    node = peer.conn.node
    got = res["peers"].get(node)
    if got is None and res["save_rc"] != 0:  # the engine refused before any byte left
        raise ShipError(
            f"docker save {src.ref} failed on the source: {res['save_err'].strip()[-300:]}",
            node=src.node,
            fix=RERUN,
        )
    if got is None:
        raise ShipError(
            "the image never reached this node: a node before it in the pipeline failed", node=node, fix=RERUN
        )
    host = peer.hop[-2].rpartition("@")[2] if peer.hop else node
    err = hop_error(src.node, node, host, got["rc"], got["err"])
    if err is not None:
        raise err
    if res["save_rc"] != 0:
        raise ShipError(
            f"docker save {src.ref} failed on the source: {res['save_err'].strip()[-300:]}",
            node=src.node,
            fix=RERUN,
        )
    if got["rc"] == 0:
        return
    text = got["err"].strip()
    if "no space left" in text.lower():
        raise DiskFullError(
            f"docker load ran out of disk on the node: {text.splitlines()[-1]}",
            node=node,
            fix="free disk on the node (`docker system prune`), then rerun `sparkctl ship`",
        )
    if res.get("codec_rc") not in (None, 0):
        said = (res.get("codec_err") or "").strip().splitlines()
        raise ShipError(
            f"zstd on the source failed (exit {res['codec_rc']}): {said[-1] if said else 'no output'}",
            node=src.node,
            fix="rerun `sparkctl ship`; `--no-compress` sends the stream as `docker save` writes it",
        )
    raise LoadRefusedError(
        f"docker load failed (exit {got['rc']}): {text.splitlines()[-1] if text else 'no output'}",
        node=node,
        fix=RERUN,
    )


__all__ = [
    "ImageResult",
    "Peer",
    "SourceImage",
    "SourceMissingError",
    "peer_address",
    "ship_image",
    "source_image",
]
