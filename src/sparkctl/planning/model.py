"""The plan's data: what runs on every rank of every replica, and the router in front of them.

Built by plan.build_plan (pure) and executed unchanged by the lifecycle; `to_json` is what
`plan --json` prints (secrets only by source, never by value).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace

from sparkctl.engines.base import LaunchGate, Readiness
from sparkctl.planning.gateway import GatewaySpec
from sparkctl.planning.hardening import Mount, RunOptions
from sparkctl.secrets import SecretFile, SecretRef, masked

LABEL_PREFIX = "sparkctl."  # every container sparkctl starts carries sparkctl.cluster, .mode, .node ...


@dataclass(frozen=True)
class RankSpec:
    rank: int
    node: str
    container_name: str
    image: str
    argv: list[str]
    env: dict[str, str | SecretRef]
    mounts: list[Mount]
    options: RunOptions
    labels: dict[str, str] = field(default_factory=dict)
    gpus: int = 1
    secrets: list[SecretFile] = field(default_factory=list)  # files written/mounted, values never here
    group: int = 0  # the replica group (index into Plan.groups)
    node_rank: int = 0  # the engine's node rank inside the group (== rank when there is one group)
    role: str = "engine"  # "engine", "router" for Plan.router, "gateway" (planning/gateway_container.py)
    gateway: GatewaySpec | None = None  # the API behind a gateway (rank 0 of a group, the router)
    files: dict[str, str] = field(default_factory=dict)  # plain files placed with the secrets (read-only)

    def secret_refs(self) -> list[SecretRef]:
        return [f.ref for f in self.secrets]

    def env_masked(self) -> dict[str, str]:
        return {k: masked(v) for k, v in self.env.items()}

    def to_json(self) -> dict:
        out = asdict(self)
        out["env"] = self.env_masked()
        if self.gateway is not None:
            out["gateway"]["routes"] = [f"{m} {t}" for m, t in self.gateway.routes]
            out["gateway"]["key"] = self.gateway.key.describe() if self.gateway.key else None
            out["gateway"]["answers"] = {t: json.loads(body) for t, body in self.gateway.answers}
            out["gateway"]["named"] = [
                {"name": k.name, "key": k.ref.describe(), "per_minute": k.per_minute}
                for k in self.gateway.named
            ]
        out.pop("files")
        out["secrets"] = [
            {"target": f.target, "key": f.yaml_key, "value": f.ref.describe()} for f in self.secrets
        ]
        return out


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    served_model_name: str
    api_key: SecretRef | None = None  # sent as a bearer token by readiness and status
    readiness: Readiness = Readiness()  # the engine's paths (a router's: the default ones)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def api_base(self) -> str:
        return f"{self.url}/v1"


@dataclass(frozen=True)
class GateSpec:
    """A group started gated (planning/launch_gate.py): its ranks block after the rendezvous until
    admission on every one of `nodes` passed and sparkctl opened the gate on `node`."""

    node: str  # the head's node: its rank 0 serves the gate's control server
    host: str  # the address that server binds (rank 0's --host)
    port: int
    reach: str  # the address sparkctl asks it at, from `node` itself (loopback for a wildcard bind)
    nodes: list[str]  # admission runs on each before the gate opens
    protocol: LaunchGate

    @property
    def url(self) -> str:
        return f"http://{self.reach}:{self.port}"

    def describe(self) -> str:
        return (
            f"{self.protocol.flag} {self.port} on {self.node} ({self.host}): admission on "
            f"{', '.join(self.nodes)} after the rendezvous, then POST {self.protocol.activate_path}"
        )


@dataclass(frozen=True)
class GroupSpec:
    """One replica: its ranks (indices into Plan.ranks, node rank 0 first), API and rendezvous."""

    index: int
    ranks: list[int]
    endpoint: Endpoint
    dist_init_addr: str | None
    head_node: str
    worker_host: str | None = None  # the address the router reaches this replica at (an IP)
    gate: GateSpec | None = None  # started gated (memory.gated_start and the engine has a gate)

    @property
    def worker_url(self) -> str:
        return f"http://{self.worker_host}:{self.endpoint.port}" if self.worker_host else self.endpoint.url


@dataclass(frozen=True)
class ContainerRef:
    node: str
    name: str
    mode: str


@dataclass(frozen=True)
class PlanFacts:
    """What only the nodes can tell (from preflight probes), needed to finish a plan."""

    hcas: dict[str, list[str]] = field(default_factory=dict)  # node -> RoCE devices (for hcas: auto)
    gid_index: dict[str, int | None] = field(default_factory=dict)  # node -> RoCE v2 GID index (auto)
    # node -> (IP, where it came from): a node addressed by name binds to the IP the name has on
    # that node (the container may not resolve the name: mDNS `.local`, /etc/hosts of the host)
    addresses: dict[str, tuple[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    cluster: str
    mode: str
    tp: int
    nnodes: int  # nodes of one replica
    ranks: list[RankSpec]  # every rank of every replica, group by group
    endpoint: Endpoint  # the user's one endpoint: the router's with replicas, else replica 0's
    stop_first: list[ContainerRef]
    dist_init_addr: str | None  # replica 0's rendezvous
    config_hash: str
    image_source: str  # "ref" or "recipe:<name>"
    unresolved: list[str] = field(default_factory=list)  # what `up` must resolve first (e.g. hcas: auto)
    warnings: list[str] = field(default_factory=list)  # security notes `plan` shows (docs/security.md)
    notes: list[str] = field(default_factory=list)  # how it starts (e.g. a gated start), `plan` shows
    pp: int = 1
    groups: list[GroupSpec] = field(default_factory=list)
    router: RankSpec | None = None  # sglang-router's container when replicas > 1 (role "router")
    addresses: list[str] = field(default_factory=list)  # which IP each node's --host is, and from where
    node_ips: dict[str, tuple[str, str]] = field(
        default_factory=dict
    )  # PlanFacts.addresses it was built with

    @property
    def replicas(self) -> int:
        return len(self.groups)

    def group_ranks(self, index: int) -> list[RankSpec]:
        return [self.ranks[i] for i in self.groups[index].ranks]

    @property
    def shape(self) -> str:
        """One line: `tp=2 on spark1+spark2`, or `2 replicas of tp=2: spark1+spark2 | spark3+spark4`."""
        size = f"tp={self.tp}" + (f" pp={self.pp}" if self.pp > 1 else "")
        if self.replicas <= 1:
            return f"{size} on {'+'.join(self.nodes)}"
        groups = " | ".join("+".join(r.node for r in self.group_ranks(g.index)) for g in self.groups)
        where = f", router on {self.router.node}" if self.router else ""
        return f"{self.replicas} replicas of {size}: {groups}{where}"

    @property
    def all_nodes(self) -> list[str]:
        """Nodes holding a rank or the router, in order, each once."""
        router = [self.router.node] if self.router else []
        return list(dict.fromkeys([*self.nodes, *router]))

    @property
    def addresses_pending(self) -> bool:
        """A node addressed by name whose IP (a rank's --host, a router's worker URL) `up` reads."""
        return any(line.endswith("(resolved at `up`)") for line in self.addresses)

    @property
    def settled_hash(self) -> str | None:
        """The config hash running containers of this plan carry; None while something is
        unresolved (`hcas: auto` is read from the nodes at `up`, which changes the hash)."""
        return None if self.unresolved else self.config_hash

    @property
    def nodes(self) -> list[str]:
        return [r.node for r in self.ranks]

    def rank(self, n: int) -> RankSpec:
        """The rank whose `rank` is n (a replica's sub-plan holds only some of them)."""
        spec = self.ranks[n] if n < len(self.ranks) and self.ranks[n].rank == n else None
        return spec or next(r for r in self.ranks if r.rank == n)

    def replica(self, index: int) -> Plan:
        """This plan cut to one replica: its ranks, its own endpoint and rendezvous, no router.
        What `up` waits on per group and what a rolling switch stops and starts."""
        group = self.groups[index]
        return replace(
            self,
            ranks=self.group_ranks(index),
            endpoint=group.endpoint,
            dist_init_addr=group.dist_init_addr,
            groups=[group],
            router=None,
        )

    def to_json(self) -> dict:
        return {
            "cluster": self.cluster,
            "mode": self.mode,
            "tp": self.tp,
            "pp": self.pp,
            "replicas": self.replicas,
            "nnodes": self.nnodes,
            "config_hash": self.config_hash,
            "image_source": self.image_source,
            "dist_init_addr": self.dist_init_addr,
            "endpoint": {
                "host": self.endpoint.host,
                "port": self.endpoint.port,
                "served_model_name": self.endpoint.served_model_name,
                "url": self.endpoint.url,
                "api_key": self.endpoint.api_key.describe() if self.endpoint.api_key else None,
            },
            "warnings": self.warnings,
            "notes": self.notes,
            "addresses": self.addresses,
            "stop_first": [asdict(c) for c in self.stop_first],
            "unresolved": self.unresolved,
            "ranks": [r.to_json() for r in self.ranks],
            "groups": [
                {
                    "index": g.index,
                    "ranks": g.ranks,
                    "url": g.worker_url,
                    "dist_init_addr": g.dist_init_addr,
                    "gate": (
                        {"node": g.gate.node, "host": g.gate.host, "port": g.gate.port, "nodes": g.gate.nodes}
                        if g.gate
                        else None
                    ),
                }
                for g in self.groups
            ],
            "router": self.router.to_json() if self.router else None,
        }
