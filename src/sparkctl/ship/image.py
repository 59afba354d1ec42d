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

from sparkctl.ship.errors import RERUN, DiskFullError, LoadRefusedError, ShipError, SourceMissingError
from sparkctl.ship.hop import hop_error, peer_address, run_push
from sparkctl.ship.progress import Progress
from sparkctl.ship.tarfilter import chain_ids
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
    res = conn.run(["docker", "image", "inspect", "--format", "{{.Id}}", ref], timeout=60)
    return res.stdout.strip() if res.ok else None


def ship_image(
    src: SourceImage,
    src_conn: Connector,
    peer: Connector,
    peer_state: dict,
    hop: list[str],
    transfers: Transfers,
    progress: Progress,
    *,
    check_space: bool = True,
    dry_run: bool = False,
) -> ImageResult:
    key = f"{peer.node}:image"
    if peer_state.get("id") == src.id:
        progress.start(key, f"{peer.node} image", 0)
        progress.finish(key, "same image ID, skipped")
        return ImageResult(peer.node, "skipped", src.id, src.node, layers_skipped=len(src.layers))
    k = peer_prefix(peer_state.get("chains") or [], src.layers)
    need = sum(src.layer_sizes[k:])
    free = peer_state.get("free")
    if check_space and free is not None and free < need * LOAD_SPACE_FACTOR + SPACE_MARGIN:
        raise DiskFullError(
            f"not enough disk for the image: loading {human_bytes(need)} of layers needs about "
            f"{human_bytes(need * LOAD_SPACE_FACTOR + SPACE_MARGIN)} free in the Docker data root, {human_bytes(free)} free",
            node=peer.node,
            fix="free disk on the node (`docker system prune`, old images), then rerun `sparkctl ship`",
        )
    if dry_run:
        return ImageResult(peer.node, "would ship", src.id, src.node, bytes_sent=need, bytes_skipped=sum(src.layer_sizes[:k]),
                           layers_sent=len(src.layers) - k, layers_skipped=k)  # fmt: skip
    progress.start(key, f"{peer.node} image (from {src.node})", need or None)
    t0 = time.monotonic()
    req = {"ref": src.ref, "diff_ids": src.layers, "skip": list(range(k)), "hop": hop}
    res = run_push(src_conn, "push-image", req, transfers, progress, key)
    if res["load_rc"] != 0 and k:
        # An engine that wants every layer file (e.g. a containerd image store) refused the filtered
        # stream: send it whole. A broken link or a failed `docker save` is not retried this way.
        _check(res, src, peer.node, hop, retryable=True)
        progress.start(key, f"{peer.node} image (whole, from {src.node})", sum(src.layer_sizes) or None)
        res = run_push(src_conn, "push-image", {**req, "skip": []}, transfers, progress, key)
    _check(res, src, peer.node, hop, retryable=False)
    got = peer_image_id(peer, src.ref)
    if got != src.id:
        raise ShipError(
            f"after loading, {src.ref} on the peer is {got and got[:19]}, expected {src.id[:19]}",
            node=peer.node,
            fix=RERUN,
        )
    skipped = res["skipped_layers"]
    sent = res["sent"] if res["sent"] is not None else need
    result = ImageResult(peer.node, "shipped", src.id, src.node, bytes_sent=sent, bytes_skipped=res["skipped_bytes"],
                         layers_sent=len(src.layers) - len(skipped), layers_skipped=len(skipped),
                         seconds=time.monotonic() - t0)  # fmt: skip
    progress.finish(key, f"loaded, {len(skipped)} layer(s) already there")
    return result


def _check(res: dict, src: SourceImage, peer: str, hop: list[str], *, retryable: bool) -> None:
    host = hop[-2].rpartition("@")[2] if hop else peer
    err = hop_error(src.node, peer, host, res["load_rc"], res["load_err"])
    if err is not None:
        raise err
    if res["save_rc"] != 0:
        raise ShipError(
            f"docker save {src.ref} failed on the source: {res['save_err'].strip()[-300:]}",
            node=src.node,
            fix=RERUN,
        )
    if res["load_rc"] == 0:
        return
    text = res["load_err"].strip()
    if "no space left" in text.lower():
        raise DiskFullError(
            f"docker load ran out of disk on the node: {text.splitlines()[-1]}",
            node=peer,
            fix="free disk on the node (`docker system prune`), then rerun `sparkctl ship`",
        )
    if retryable:
        return
    raise LoadRefusedError(
        f"docker load failed (exit {res['load_rc']}): {text.splitlines()[-1] if text else 'no output'}",
        node=peer,
        fix=RERUN,
    )


__all__ = ["ImageResult", "SourceImage", "SourceMissingError", "peer_address", "ship_image", "source_image"]
