"""From discovered nodes (+ the chosen fabric, + the user's answers) to a profile draft. Pure.

Decides names, modes and everything written into the profile (the defaults for the questions are
defaults.py); render.py turns a Draft into commented YAML.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sparkctl.discover.defaults import Revision, hf_caches, pin_revision
from sparkctl.discover.fabric import FabricEnd, FabricOption
from sparkctl.discover.facts import EngineImage, NodeDiscovery
from sparkctl.engines import DEFAULT_ENGINE
from sparkctl.profile.schema import NAME_RE

MAX_NAME = 40


@dataclass(frozen=True)
class ModeDraft:
    name: str
    nodes: tuple[str, ...]
    tp: int
    default: bool = False
    why: str = ""
    replicas: int = 1


@dataclass(frozen=True)
class NodeDraft:
    name: str
    address: str
    user: str | None
    port: int | None
    gpus: int
    gpu: dict | None  # profile GpuSpec fields
    fabric: FabricEnd | None
    hf_cache: str | None = None  # only where it differs from model.hf_cache
    note: str = ""


@dataclass(frozen=True)
class Answers:
    """What cannot be discovered (asked, or given as flags)."""

    cluster: str
    model: str
    image: str
    model_revision: str | None = None  # None: pin what refs/main is on every node, else main
    draft: str | None = None
    draft_revision: str | None = None
    hf_cache: str | None = None  # --hf-cache; None: where rank 0 has the model


@dataclass(frozen=True)
class Draft:
    cluster: str
    nodes: list[NodeDraft]
    modes: list[ModeDraft]
    fabric: FabricOption | None
    mtu: int
    transport: str
    image: str
    image_note: str
    engine_version: str | None  # the release the image's label names, for the engine's version key
    model: str
    model_revision: Revision
    draft: str | None
    draft_revision: Revision | None
    hf_cache: str
    container_gpus: bool
    rdma_preset: bool  # RoCE fabric: the multi-node modes get the rdma preset (never --privileged)
    api_host: str = "127.0.0.1"  # init proposes loopback; serving the LAN is a choice made in the profile
    known_hosts: str | None = None
    ssh_key: str | None = None
    ssh_user: str | None = None
    warnings: list[str] = field(default_factory=list)
    engine: str = DEFAULT_ENGINE  # engine.kind of the chosen image


# ----------------------------------------------------------------------------- names and modes
def sanitize(name: str) -> str:
    """A valid profile name (lowercase [a-z0-9_.-], starts alphanumeric, <= 40), or ''."""
    s = re.sub(r"[^a-z0-9_.-]+", "-", name.strip().lower()).strip("-._")[:MAX_NAME]
    return s if re.match(NAME_RE, s) else ""


def node_names(hostnames: list[str]) -> list[str]:
    """Node names from hostnames (first label), unique; `node<i>` where none is usable."""
    out: list[str] = []
    for i, host in enumerate(hostnames, 1):
        name = sanitize(host.split(".", 1)[0]) or f"node{i}"
        base, n = name, 2
        while name in out:
            name = f"{base[: MAX_NAME - 3]}-{n}"
            n += 1
        out.append(name)
    return out


def default_cluster(names: list[str]) -> str:
    return sanitize("-".join(names)) or "cluster"


def _mode_name(*parts: str) -> str:
    return "-".join(parts)[:MAX_NAME].rstrip("-._")


def propose_modes(names: list[str], gpus: list[int], multi_node: bool) -> list[ModeDraft]:
    """Solo on each node (the first is the default), TP across all nodes (one rank per node, each
    with the GPUs the smallest node has), TP over a node's GPUs where it has several, and there also a
    replica per GPU behind the router. No replica-per-node mode: init binds the API to
    loopback, which a router on another node cannot reach (docs/topology.md says how)."""
    modes = [ModeDraft("solo", (names[0],), 1, True, f"one GPU on {names[0]}")]
    for name in names[1:]:
        modes.append(ModeDraft(_mode_name("solo", name), (name,), 1, False, f"one GPU on {name}"))
    if multi_node and len(names) > 1:
        per = max(1, min(gpus))
        tp = per * len(names)
        modes.append(
            ModeDraft(
                f"tp{tp}",
                tuple(names),
                tp,
                False,
                f"tensor parallel over {len(names)} nodes, {per} GPU(s) each",
            )
        )
    for name, g in zip(names, gpus, strict=True):
        if g >= 2:
            mode = f"tp{g}" if len(names) == 1 else _mode_name(f"tp{g}", name)
            modes.append(ModeDraft(mode, (name,), g, False, f"tensor parallel over the {g} GPUs of {name}"))
            dp = f"dp{g}" if len(names) == 1 else _mode_name(f"dp{g}", name)
            why = f"one replica per GPU of {name} behind SGLang's router"
            modes.append(ModeDraft(dp, (name,), 1, False, why, replicas=g))
    return modes


# ----------------------------------------------------------------------------- the draft
def gpu_facts(node: NodeDiscovery) -> dict | None:
    rep = node.gpus
    if rep is None or not rep.gpus or not rep.gpus[0].compute_cap:
        return None
    g = rep.gpus[0]
    if rep.unified_memory:
        mib = (node.mem_total_kib or 0) / 1024
    else:
        mib = g.memory_total_mib or 0
    if mib <= 0:
        return None
    return {
        "name": g.name,
        "memory_gib": round(mib / 1024, 1),
        "compute_capability": g.compute_cap,
        "unified_memory": rep.unified_memory,
    }


def _node_warnings(nodes: list[NodeDiscovery], names: list[str], gpus: list[int]) -> list[str]:
    warnings: list[str] = []
    any_gpu = any(gpus)
    if not any_gpu:
        warnings.append(
            "no NVIDIA GPU found on any node (nvidia-smi): writing gpus: 1 as a placeholder and "
            "engine.container.gpus: false (CPU-only rig); fix both before serving a real model"
        )
    for n, name, g in zip(nodes, names, gpus, strict=True):
        if any_gpu and not g:
            warnings.append(f"{name}: no NVIDIA GPU found (nvidia-smi); preflight will flag it")
        if any_gpu and g and not n.nvidia_runtime:
            warnings.append(f"{name}: Docker has no NVIDIA runtime; install nvidia-container-toolkit")
        warnings += [f"{name}: {p}" for p in n.problems]
    return warnings


def _fabric_settings(fabric: FabricOption | None, warnings: list[str]) -> tuple[int, str]:
    """(mtu, transport) for the profile; what is wrong with the fabric goes to `warnings`."""
    mtu, transport = 9000, "tcp"
    if fabric is None:
        return mtu, transport
    transport = "roce" if fabric.roce else "tcp"
    mtus = {e.mtu for e in fabric.ends}
    if len(mtus) == 1 and min(mtus) >= 9000:
        mtu = mtus.pop()
    else:
        low = ", ".join(f"{e.node} {e.netdev} {e.mtu}" for e in fabric.ends if e.mtu < 9000)
        warnings.append(
            f"fabric MTU below 9000 ({low}): NCCL hangs at 1500; `sudo ip link set dev "
            "NETDEV mtu 9000` on each node (persist it), preflight checks it"
        )
    if transport == "tcp":
        no_roce = [e.node for e in fabric.ends if not e.hcas]
        warnings.append(
            f"no ACTIVE RoCE device bound to the fabric netdev on {', '.join(no_roce)}: "
            "transport tcp (NCCL over sockets, much slower than RoCE)"
        )
    return mtu, transport


def _image_facts(
    nodes: list[NodeDiscovery], names: list[str], image: str, warnings: list[str]
) -> tuple[str, EngineImage | None]:
    """The image's note for the profile comment, and its facts (its engine and version)."""
    holders = [nm for n, nm in zip(nodes, names, strict=True) if any(i.ref == image for i in n.images)]
    img: EngineImage | None = next((i for n in nodes for i in n.images if i.ref == image), None)
    ids = {i.id for n in nodes for i in n.images if i.ref == image}
    if holders:
        image_note = f"present on {', '.join(holders)}" + (
            " (same id)" if len(ids) == 1 and len(holders) > 1 else ""
        )
    else:
        image_note = "not found on any node when init ran"
    missing = [nm for nm in names if nm not in holders]
    if holders and missing:
        warnings.append(f"image {image} is missing on {', '.join(missing)}: `sparkctl ship --image` it")
    elif len(ids) > 1:
        warnings.append(f"image {image} has different ids on the nodes: ship one to the others")
    return image_note, img


def build_draft(
    nodes: list[NodeDiscovery],
    names: list[str],
    fabric: FabricOption | None,
    answers: Answers,
    *,
    addresses: list[tuple[str, str | None, int | None]],
    known_hosts: str | None = None,
    ssh_key: str | None = None,
    ssh_user: str | None = None,
) -> Draft:
    """`addresses`: per node (address for the profile, user, port) as the user gave them."""
    gpus = [n.gpu_count for n in nodes]
    warnings = _node_warnings(nodes, names, gpus)
    hf_cache, per_node_cache = hf_caches(nodes, answers.model, answers.hf_cache)
    model_rev = pin_revision(nodes, answers.model, per_node_cache, answers.model_revision)
    draft_rev = (
        pin_revision(nodes, answers.draft, per_node_cache, answers.draft_revision) if answers.draft else None
    )
    for repo in [answers.model, *([answers.draft] if answers.draft else [])]:
        lacking = [nm for n, nm in zip(nodes, names, strict=True) if repo not in n.models()]
        pinned = model_rev if repo == answers.model else draft_rev
        rev = getattr(pinned, "value", None) or "main"
        if lacking and len(lacking) == len(nodes):  # nothing to ship from: download it
            warnings.append(
                f"{repo} is in no node's HF cache: download it on {lacking[0]} "
                f"(`hf download {repo} --revision {rev}`), then `sparkctl ship --weights`"
            )
        elif lacking:
            warnings.append(
                f"{repo} is not in the HF cache of {', '.join(lacking)}: `sparkctl ship --weights` it"
            )

    node_drafts = []
    for n, name, g, (addr, user, port) in zip(nodes, names, gpus, addresses, strict=True):
        note = "this machine" if addr == "local" else f"{n.hostname or n.host}, reached as {n.description}"
        node_drafts.append(
            NodeDraft(
                name=name,
                address=addr,
                user=user,
                port=port,
                gpus=max(g, 1),
                gpu=gpu_facts(n),
                fabric=fabric.end(name) if fabric else None,
                hf_cache=per_node_cache[n.host] if per_node_cache[n.host] != hf_cache else None,
                note=note,
            )
        )
    mtu, transport = _fabric_settings(fabric, warnings)
    image_note, img = _image_facts(nodes, names, answers.image, warnings)

    return Draft(
        cluster=answers.cluster,
        nodes=node_drafts,
        modes=propose_modes(names, gpus, fabric is not None),
        fabric=fabric,
        mtu=mtu,
        transport=transport,
        image=answers.image,
        image_note=image_note,
        engine_version=img.version if img else None,
        engine=img.engine if img else DEFAULT_ENGINE,
        model=answers.model,
        model_revision=model_rev,
        draft=answers.draft,
        draft_revision=draft_rev,
        hf_cache=hf_cache,
        container_gpus=any(gpus),
        rdma_preset=transport == "roce",
        known_hosts=known_hosts,
        ssh_key=ssh_key,
        ssh_user=ssh_user,
        warnings=warnings,
    )
