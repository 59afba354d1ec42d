"""What every node holds, in one round trip each, and which node is the source of each item.

Any node of the run can be the source: the one that holds the complete image (the pinned ID when
the profile pins one) or the complete snapshot. Preference: `--from`, else the node sparkctl runs
on, else the mode's nodes in rank order, else the `--to` nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkctl.errors import ConnectError, DockerDownError, SparkctlError, several
from sparkctl.facts.hfcache import repo_dir
from sparkctl.fanout import CancelToken, fan_out
from sparkctl.profile.derived import hf_cache_for
from sparkctl.remote.manifest import Manifest, parse_manifest, revision_of
from sparkctl.remote.ops import run_op
from sparkctl.ship.errors import RERUN, ShipError, SourceMissingError

if TYPE_CHECKING:
    from sparkctl.connectors.pool import NodePool
    from sparkctl.profile.schema import ModelRef, Profile
    from sparkctl.ship.image import Codec


@dataclass
class NodeState:
    node: str
    image: dict | None = None  # {id, layers, size, history, chains, free} or {} when absent
    models: dict[str, dict] = field(default_factory=dict)  # model id -> manifest doc (+ free)
    cores: int = 1
    load: float = 0.0  # the node's 1-minute load average, from `state`
    zstd: bool = False  # `zstd` on the node's PATH: the image may cross the link compressed
    error: BaseException | None = None
    docker_error: SparkctlError | None = None  # the image was asked for and Docker did not answer

    @property
    def image_unknown(self) -> bool:
        return self.error is not None or self.docker_error is not None


def gather(
    profile: Profile,
    pool: NodePool,
    nodes: list[str],
    image_ref: str | None,
    models: list[ModelRef],
    *,
    deep: bool,
    cancel: CancelToken,
    want: str | None = None,
) -> dict[str, NodeState]:
    """The `state` op on every node at once: image ID/layers/free space and each model's manifest
    (hashes from the quick check, or every byte rehashed when `deep`). `want`: the image ID the
    source is expected to have; a node whose image is that one answers short (see complete_images)."""

    def one(node: str) -> NodeState:
        repos = {m.id: repo_dir(hf_cache_for(profile, node), m.id) for m in models}
        req = {
            "image": image_ref,
            "want": want,
            "models": [[repos[m.id], revision_of(m)] for m in models],
            "mode": "deep" if deep else "lazy",
        }
        doc = run_op(pool.get(node), "state", payload=req, timeout=None)
        image = doc.get("image")
        docker = None
        if image_ref and isinstance(image, dict) and image.get("error"):
            docker = DockerDownError(
                f"Docker is not answering, so its images are unknown ({image['error']})",
                node=node,
                fix=f"start it on {node}: `sudo systemctl start docker` (check with `docker info`)",
            )
        return NodeState(
            node,
            image,
            {m.id: doc["models"][repos[m.id]] for m in models},
            int(doc.get("cores") or 1),
            float(doc.get("load") or 0.0),
            zstd=bool(doc.get("zstd")),
            docker_error=docker,
        )

    states = {}
    for node, outcome in fan_out(nodes, one, cancel=cancel).items():
        states[node] = outcome.value if outcome.ok else NodeState(node, error=outcome.error)
    return states


def streams_for(cores: int, load: float = 0.0) -> int:
    """Weights streams one node can take: one per ~4 cores, 1..8, and at most half its spare cores
    (cores minus its 1-minute load), so that a node serving a model is not starved."""
    spare = max(0, cores - math.ceil(load))
    return max(1, min(8, cores // 4, spare // 2))


def stream_bound(states: dict[str, NodeState], nodes: list[str]) -> int:
    """Streams of one weights push: each stream costs a core on the source and on every peer."""
    return min(streams_for(states[n].cores, states[n].load) for n in nodes)


def image_codec(states: dict[str, NodeState], nodes: list[str], wanted: bool = True) -> Codec | None:
    """zstd on the image's link when it is `wanted` and every end of the push (source and peers)
    has it, with the source's stream share of its spare cores as threads; else the plain stream."""
    if not wanted or not all(states[n].zstd for n in nodes):
        return None
    from sparkctl.ship.image import Codec

    return Codec("zstd", stream_bound(states, nodes[:1]))


def complete_images(
    pool: NodePool, states: dict[str, NodeState], src: str, peers: list[str], ref: str, cancel: CancelToken
) -> None:
    """A node answered short (its image is the `want`ed one: `same`) but a transfer follows: the
    source's layer sizes and each lacking peer's layers and free space are read now, one more round
    trip to just those nodes. Nothing to send: nothing is asked again."""
    sid = (states[src].image or {}).get("id")
    lacking = [
        n
        for n in peers
        if n != src
        and states[n].error is None
        and states[n].docker_error is None
        and (states[n].image or {}).get("id") != sid
    ]
    redo = [n for n in ([src, *lacking] if lacking else []) if (states[n].image or {}).get("same")]
    if not redo:
        return
    got = fan_out(
        redo, lambda n: run_op(pool.get(n), "state", payload={"image": ref}, timeout=None), cancel=cancel
    )
    for node, outcome in got.items():
        image = outcome.value.get("image") if outcome.ok else None
        if isinstance(image, dict) and not image.get("error") and (image.get("id") or node != src):
            states[node].image = image
            continue
        err = outcome.error if not outcome.ok else None
        why = (image or {}).get("error") or f"no image {ref} any more"
        err = err or ShipError(f"asked again, Docker answered: {why}", node=node, fix=RERUN)
        if node == src:
            raise err
        states[node].error = err


def preference(profile: Profile, mode_nodes: list[str], targets: list[str]) -> list[str]:
    """Candidate sources in order: the node sparkctl runs on, the mode's nodes by rank, the targets."""
    local = [n.name for n in profile.nodes if n.is_local]
    return list(dict.fromkeys([*local, *mode_nodes, *targets]))


def image_source(states: dict[str, NodeState], order: list[str], ref: str, want_id: str | None) -> str:
    for node in order:
        img = states[node].image if node in states else None
        if img and img.get("id") and (not want_id or img["id"] == want_id):
            return node
    looked = ", ".join(
        _looked(states, n, (states[n].image or {}).get("id", "absent")[:19], docker=True)
        for n in order
        if n in states
    )
    docker_down = [states[n].docker_error for n in order if n in states and states[n].docker_error]
    lost = [_unreachable(n, states[n].error) for n in order if n in states and states[n].error is not None]
    if docker_down or lost:  # not "absent": a node or its Docker did not answer, so nobody knows (exit 5)
        raise several([*lost, *docker_down])
    pinned = f" with the pinned ID {want_id[:19]}" if want_id else ""
    raise SourceMissingError(
        f"image {ref}{pinned} is on no node (looked on: {looked})",
        node=None,
        fix="build or pull it on one node first (or fix image.id in the profile), then rerun `sparkctl ship`",
    )


def model_source(profile: Profile, states: dict[str, NodeState], order: list[str], ref: ModelRef) -> str:
    for node in order:
        doc = states[node].models.get(ref.id) if node in states and states[node].error is None else None
        if doc and doc.get("outside"):
            rel, where = doc["outside"][0]
            raise ShipError(
                f"{ref.id}: snapshot file {rel} is a symlink leading out of the HF cache (to {where}); refused",
                node=node,
                fix="replace it with the real file inside the cache (re-download the snapshot there)",
            )
        if doc and doc.get("commit") and doc.get("files") and not doc.get("broken"):
            return node
    looked = ", ".join(
        _looked(states, n, repo_dir(hf_cache_for(profile, n), ref.id)) for n in order if n in states
    )
    rev = revision_of(ref)
    raise SourceMissingError(
        f"{ref.id}@{rev} is complete on no node (looked in: {looked})",
        node=None,
        fix=f"download it on one node first (`huggingface-cli download {ref.id}"
        f"{' --revision ' + ref.revision if ref.revision else ''}`), then rerun `sparkctl ship`",
    )


def _unreachable(node: str, err: BaseException) -> SparkctlError:
    if isinstance(err, ConnectError):
        return err if err.node else ConnectError(err.message, node=node, fix=err.fix)
    return ConnectError(
        f"cannot ask for the image: {err}", node=node, fix="make the node reachable, then rerun"
    )


def _looked(states: dict[str, NodeState], node: str, what: str, docker: bool = False) -> str:
    err = states[node].error
    if err is not None:
        return f"{node} (unreachable: {getattr(err, 'message', err)})"
    if docker and states[node].docker_error is not None:
        return f"{node} (Docker not answering)"
    return f"{node}:{what}"


def manifest_of(profile: Profile, node: str, ref: ModelRef, doc: dict) -> Manifest:
    return parse_manifest(node, ref.id, revision_of(ref), repo_dir(hf_cache_for(profile, node), ref.id), doc)
