"""A rank's pod template: the container `up` runs, as Kubernetes objects (pure).

What maps to what (docs/kubernetes.md): `--network host` -> `hostNetwork` (+ `ClusterFirstWithHostNet`
so LWS_LEADER_ADDRESS still resolves), the rdma preset -> the device directory by `hostPath` and
`IPC_LOCK` (never `privileged`), a private IPC namespace's `/dev/shm` -> a memory `emptyDir` of the
same size, `--gpus` -> `nvidia.com/gpu`, the node's HF hub and Triton cache -> `hostPath`, the
secret files -> one Secret's keys at the plan's paths.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from sparkctl.errors import ProfileError, UsageError
from sparkctl.planning.build import CONTAINER_HF_HOME
from sparkctl.planning.hardening import Mount, RunOptions
from sparkctl.planning.model import RankSpec

HF_HUB_TARGET = f"{CONTAINER_HF_HOME}/hub"
SECRET_MODE = 0o400
_UNITS = {"b": "", "k": "Ki", "m": "Mi", "g": "Gi"}


@dataclass
class PodParts:
    """Volumes and mounts collected while a container is rendered."""

    volumes: list[dict] = field(default_factory=list)
    mounts: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, volume: dict, mount: dict) -> None:
        if all(v["name"] != volume["name"] for v in self.volumes):
            self.volumes.append(volume)
        self.mounts.append(mount)


def quantity(docker_size: str) -> str:
    """Docker's `32g` (binary units) as a Kubernetes quantity (`32Gi`)."""
    number, unit = re.fullmatch(r"(\d+)([bkmg]?)", docker_size.lower()).groups()  # type: ignore[union-attr]
    return number + _UNITS.get(unit or "b", "")


def volume_name(path: str, prefix: str) -> str:
    """A DNS-1123 label for a volume from its container path."""
    base = re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-") or "root"
    return f"{prefix}-{base}"[:63].rstrip("-")


def same_mounts(ranks: list[RankSpec], secret_targets: set[str]) -> list[Mount]:
    """The host mounts every rank shares; a template has one hostPath per volume."""
    first = [m for m in ranks[0].mounts if m.target not in secret_targets]
    for spec in ranks[1:]:
        own = [m for m in spec.mounts if m.target not in secret_targets]
        if own != first:
            where = {m.target: m.source for m in own}
            diff = next(m for m in first if where.get(m.target) != m.source)
            raise UsageError(
                f"node {spec.node} keeps {diff.target} at {where.get(diff.target)}, node "
                f"{ranks[0].node} at {diff.source}: a pod template takes one hostPath",
                fix="give every node the same path (model.hf_cache / model.triton_cache absolute, or "
                "the same login user on every node)",
            )
    return first


def host_mounts(mounts: list[Mount], offline: bool, parts: PodParts) -> None:
    for m in mounts:
        weights = m.target == HF_HUB_TARGET or m.target.endswith("/huggingface/hub")  # root or node user
        read_only = m.read_only or (weights and offline)
        kind = "Directory" if weights else "DirectoryOrCreate"
        name = volume_name(m.target, "host")
        parts.add(
            {"name": name, "hostPath": {"path": m.source, "type": kind}},
            {"name": name, "mountPath": m.target, "readOnly": read_only},
        )
        if weights and not read_only:
            parts.notes.append(
                "engine.offline is false: the HF hub is mounted read-write (the engine may download)"
            )


def secret_mounts(spec: RankSpec, secret_name: str, parts: PodParts) -> None:
    """The rank's secret files: keys of one Secret, mounted read-only at the plan's paths."""
    by_dir: dict[str, list[str]] = {}
    for f in spec.secrets:
        names = by_dir.setdefault(posixpath.dirname(f.target), [])
        if posixpath.basename(f.target) not in names:
            names.append(posixpath.basename(f.target))
    for directory, keys in by_dir.items():
        name = volume_name(directory, "secrets")
        items = [{"key": k, "path": k} for k in keys]
        parts.add(
            {"name": name, "secret": {"secretName": secret_name, "items": items, "defaultMode": SECRET_MODE}},
            {"name": name, "mountPath": directory, "readOnly": True},
        )


def device_mounts(options: RunOptions, rdma_resource: str | None, parts: PodParts) -> None:
    if options.rdma_devices_dir and not rdma_resource:
        d = options.rdma_devices_dir
        name = volume_name(d, "dev")
        parts.add(
            {"name": name, "hostPath": {"path": d, "type": "Directory"}}, {"name": name, "mountPath": d}
        )
    for dev in options.devices:
        host, _, rest = dev.partition(":")
        target = rest.split(":", 1)[0] or host
        name = volume_name(target, "dev")
        parts.add(
            {"name": name, "hostPath": {"path": host, "type": "CharDevice"}},
            {"name": name, "mountPath": target},
        )


def shm_mount(options: RunOptions, parts: PodParts) -> bool:
    """/dev/shm as a memory emptyDir of the plan's size; True when the pod needs hostIPC instead."""
    if options.ipc_mode == "host":
        return True
    if options.shm_size:
        volume = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": quantity(options.shm_size)}}
        parts.add(volume, {"name": "dshm", "mountPath": "/dev/shm"})
    return False


def security_context(options: RunOptions, parts: PodParts) -> dict:
    # As `up` runs the rank: every capability dropped but what it needs, no privilege escalation.
    ctx: dict = {"privileged": False, "allowPrivilegeEscalation": False}
    if options.privileged:
        raise ProfileError(
            "engine.container.privileged: true, and the export renders no privileged container",
            fix="use the rdma preset (devices, IPC_LOCK) instead of privileged: true",
        )
    caps: dict = {"drop": list(options.cap_drop)} if options.cap_drop else {}
    if options.cap_add:
        caps["add"] = list(options.cap_add)
    if caps:
        ctx["capabilities"] = caps
    for name, value in options.ulimits.items():
        if name == "memlock" and "IPC_LOCK" in options.cap_add:
            continue  # with IPC_LOCK the kernel does not apply RLIMIT_MEMLOCK to RDMA pinning
        parts.notes.append(f"ulimit {name}={value} is not carried: Kubernetes has no per-pod ulimits")
    return ctx


def resources(spec: RankSpec, rdma_resource: str | None) -> dict:
    limits: dict[str, int] = {}
    if spec.options.gpus is not None and spec.gpus:
        limits["nvidia.com/gpu"] = spec.gpus
    if rdma_resource and spec.options.rdma_devices_dir:
        limits[rdma_resource] = 1
    return {"limits": limits} if limits else {}


def node_affinity(nodes: list[str], spread: dict[str, str] | None) -> dict:
    """Only the profile's nodes; with `spread`, one pod of those labels per node (as `up` runs them)."""
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}
    out: dict = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    }
    if spread:
        out["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": spread}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    return out
