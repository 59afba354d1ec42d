"""The cluster profile: pydantic v2 models, every model `extra="forbid"`.

Validation covers the whole file before any connection is opened: cross-references (modes -> nodes),
TP vs the GPUs of a mode's nodes, and secrets kept out of plain env; the flags an engine manages are
refused when the plan is built (planning/build.py), so the profile imports no engine. docs/profile.md.
"""

from __future__ import annotations

from ipaddress import IPv4Address
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from sparkctl.profile.base import NAME_RE, Count, Name, Port, Strict
from sparkctl.profile.fleet import FleetGateway, Service, check_fleet, fill_primary
from sparkctl.profile.memory import Memory
from sparkctl.profile.router import Router
from sparkctl.profile.security import NodeDir, ssh_word
from sparkctl.profile.serving import Engine, Image, Mode, Model, ModelRef, Secret
from sparkctl.profile.values import ArgValue, release_keys

# Re-exported: the serving parts (profile/serving.py) are imported from here too.
__all__ = ["NAME_RE", "ArgValue", "Engine", "Image", "Mode", "Model", "ModelRef", "Name", "Secret", "Service"]


class GpuSpec(Strict):
    """What a node's GPUs are, for planning without touching the node (preflight probes the truth)."""

    name: str = Field(description="GPU name as nvidia-smi reports it, e.g. 'NVIDIA GB10'.")
    memory_gib: float = Field(gt=0, description="Per GPU; on unified-memory boxes the usable total.")
    compute_capability: Annotated[
        str, Field(pattern=r"^\d+\.\d+$", description="e.g. '12.1' (GB10), '8.6' (RTX 3090).")
    ]
    unified_memory: bool = Field(
        False, description="CPU and GPU share memory (GB10): budget from MemAvailable."
    )


class NodeFabric(Strict):
    netdevs: list[str] = Field(min_length=1, description="Fabric netdev(s), e.g. enp1s0f1np1.")
    ip: IPv4Address = Field(description="This node's fabric address; rank 0's is the dist-init address.")
    hcas: Literal["auto"] | list[str] = Field(
        "auto", description="RoCE devices for NCCL_IB_HCA; 'auto' reads them from sysfs."
    )
    gid_index: Literal["auto"] | Annotated[int, Field(ge=0, le=255)] | None = Field(
        None,
        description="NCCL_IB_GID_INDEX on this node (the RoCE v2 GID of its fabric IP); 'auto' reads "
        "it from sysfs; unset leaves NCCL's own choice.",
    )


class Node(Strict):
    name: Name = Field(description="Short node name used in modes, output and container labels.")
    address: str = Field(description="SSH host (or ~/.ssh/config alias); 'local' runs here without SSH.")
    user: str | None = Field(
        None, description="SSH user (default: ~/.ssh/config, then ssh.user, then yours)."
    )
    port: Port | None = Field(None, description="SSH port (default: ~/.ssh/config, then ssh.port).")
    key: str | None = Field(
        None, description="SSH private key (default: ~/.ssh/config, agent, default keys)."
    )
    gpus: Count = Field(1, ge=0, description="GPUs on this node; a mode's tp must fit in them.")
    gpu: GpuSpec | None = Field(
        None, description="GPU facts for planning offline (preflight probes the truth)."
    )
    fabric: NodeFabric | None = Field(None, description="Required on the nodes of multi-node modes.")
    hf_cache: NodeDir | None = Field(None, description="Overrides model.hf_cache on this node.")
    triton_cache: NodeDir | None = Field(None, description="Overrides model.triton_cache on this node.")

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        return ssh_word(v, "address") or v

    @field_validator("user")
    @classmethod
    def _user(cls, v: str | None) -> str | None:
        return ssh_word(v, "user")

    @property
    def is_local(self) -> bool:
        return self.address == "local"


class SshSettings(Strict):
    known_hosts: str = Field("~/.ssh/known_hosts", description="Host keys are verified against this file.")
    host_key_policy: Literal["strict", "accept-new"] = Field(
        "strict",
        description="strict refuses unknown keys; accept-new records them (changed keys always refused).",
    )
    connect_timeout: float = Field(
        10.0, gt=0, le=300, description="Seconds before a node counts as unreachable."
    )
    user: str | None = Field(None, description="Default SSH user for all nodes.")
    key: str | None = Field(None, description="Default SSH key for all nodes.")
    port: Port = Field(22, description="Default SSH port.")

    @field_validator("user")
    @classmethod
    def _user(cls, v: str | None) -> str | None:
        return ssh_word(v, "user")


class Fabric(Strict):
    mtu: int = Field(
        9000, ge=576, le=9216, description="MTU required on every fabric netdev (1500 hangs NCCL)."
    )
    transport: Literal["roce", "tcp"] = Field(
        "roce", description="roce sets NCCL_IB_HCA; tcp sets NCCL_IB_DISABLE=1."
    )
    dist_init_port: Port = Field(50051, description="Torch rendezvous port on rank 0's fabric IP.")
    min_busbw_gbps: float = Field(
        21.875,
        gt=0,
        description="fabric-test pass threshold, NCCL bus bandwidth (two Sparks direct: 21.875).",
    )
    layout: Literal["auto", "direct", "ring", "mesh", "switch"] = Field(
        "auto",
        description="How the nodes are cabled; ring (switchless, 3+ nodes) adds NCCL_ALGO=Ring. "
        "Preflight's FabricLayout compares it with what the nodes show.",
    )
    min_link_gbps: float = Field(
        200,
        gt=0,
        description="Negotiated rate each fabric netdev should report (ConnectX-7 on a Spark: 200).",
    )


class Profile(Strict):
    version: Literal[1] = Field(1, description="Profile format version.")
    cluster: Name = Field(description="Cluster name: container names, labels and the lock are keyed by it.")
    ssh: SshSettings = Field(default_factory=SshSettings, description="SSH defaults and host-key policy.")
    fabric: Fabric = Field(default_factory=Fabric, description="The node-to-node network NCCL uses.")
    nodes: list[Node] = Field(min_length=1, description="The machines.")
    image: Image = Field(description="The serving image (the same on every node).")
    model: Model = Field(description="Target and draft weights, and the caches.")
    engine: Annotated[Engine, BeforeValidator(release_keys)] = Field(
        default_factory=Engine, description="The serving engine and its launch."
    )
    modes: dict[Name, Mode] = Field(min_length=1, description="Named layouts, e.g. solo and tp2.")
    router: Router = Field(default_factory=Router, description="The router of modes with replicas.")
    memory: Memory = Field(default_factory=Memory, description="Unified-memory guard, admission, settle.")
    # A fleet (`models:`) holds its services' parts; its top level then carries the first service's.
    models: dict[Name, Service] = Field(
        default_factory=dict,
        description="A fleet: named services, each its own image, model, engine and modes (docs/fleet.md).",
    )
    gateway: FleetGateway = Field(
        default_factory=FleetGateway,
        description="A fleet's one endpoint, routing by `model` (docs/fleet.md).",
    )

    @model_validator(mode="before")
    @classmethod
    def _fleet_top(cls, data: object) -> object:
        return fill_primary(data)

    @model_validator(mode="after")
    def _cross_refs(self) -> Profile:
        names = [n.name for n in self.nodes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            where = f"nodes[{names.index(dupes[0], names.index(dupes[0]) + 1)}].name"
            raise ValueError(f"{where}: duplicate node name(s): {', '.join(dupes)}")
        ips: dict[str, str] = {}
        for i, n in enumerate(self.nodes):
            ip = str(n.fabric.ip) if n.fabric else None
            if ip in ips:
                raise ValueError(
                    f"nodes[{i}].fabric.ip: {ip} is also {ips[ip]}'s; each node has its own fabric address"
                )
            if ip:
                ips[ip] = n.name
        if self.gateway != FleetGateway() and not self.models:  # a dump's default gateway loads again
            raise ValueError(
                "gateway: the fleet's endpoint needs `models:` (a single model has its own port)"
            )
        if self.models:
            check_fleet(self, _check_modes)  # each service's modes as below, then ports across them
        else:
            _check_modes(self, "")
        return self

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def default_mode(self) -> str:
        for name, mode in self.modes.items():
            if mode.default:
                return name
        return next(iter(self.modes))


def _check_modes(profile: Profile, prefix: str) -> None:
    """A profile's (or a fleet service's: `prefix` models.<name>.) modes and router node."""
    names = [n.name for n in profile.nodes]
    by_name = {n.name: n for n in profile.nodes}
    defaults = [m for m, mode in profile.modes.items() if mode.default]
    if len(defaults) > 1:
        raise ValueError(
            f"{prefix}modes.{defaults[1]}.default: more than one default mode: {', '.join(defaults)}"
        )
    for mode_name, mode in profile.modes.items():
        for i, node in enumerate(mode.nodes):
            if node not in by_name:
                import difflib

                near = difflib.get_close_matches(node, names, n=1)
                hint = f" (did you mean '{near[0]}'?)" if near else f" (nodes: {', '.join(names)})"
                raise ValueError(f"{prefix}modes.{mode_name}.nodes[{i}]: unknown node '{node}'{hint}")
        _check_layout(profile, f"{prefix}modes.{mode_name}", mode, by_name)
    if profile.router.node is not None and profile.router.node not in by_name:
        where = f"{prefix}router.node"
        raise ValueError(f"{where}: unknown node '{profile.router.node}' (nodes: {', '.join(names)})")


# The mode key each topology rule is about, so an error points at its line in the YAML.
_RULE_KEYS = {
    "gpus-per-node": "tp",
    "nodes-divide-tp-pp": "tp",
    "sizes-positive": "tp",
    "replicas-divide-nodes": "replicas",
    "replicas-positive": "replicas",
    "node-once": "nodes",
    "gpu-ids": "gpu_ids",
}


def _check_layout(profile: Profile, where: str, mode: Mode, by_name: dict[str, Node]) -> None:
    """The topology rules (sparkctl.profile.topology), each error naming its rule; then the fabric that
    every group spanning several nodes needs. `where`: the mode's key path."""
    from sparkctl.profile.topology import TopologyError, mode_layout

    try:
        lay = mode_layout(profile, mode)
    except TopologyError as exc:
        key = _RULE_KEYS.get(exc.rule)
        raise ValueError(f"{where}{'.' + key if key else ''}: {exc}") from None
    for group in lay.groups:
        if group.nnodes > 1:
            for node in group.nodes:
                if by_name[node].fabric is None:
                    raise ValueError(
                        f"{where}.nodes: replica {group.index} spans several nodes, so node '{node}' "
                        f"needs a fabric: {{netdevs, ip}} section"
                    )
