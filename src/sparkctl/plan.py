"""The pure planning step: profile + mode (+ discovered facts) -> exactly what runs on every rank.

No I/O happens here. `sparkctl plan` prints a Plan and `sparkctl up` executes the very same
object, so what the user reviewed is what runs. The config hash covers everything that reaches
a container (image, argv, env, mounts, options), so `up` can tell "already running" from "changed".
"""

from __future__ import annotations

import getpass
import hashlib
import json
import posixpath
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sparkctl import hardening as sec
from sparkctl.engines import get_engine
from sparkctl.engines.base import Engine, RankLayout
from sparkctl.errors import UsageError
from sparkctl.hardening import SECRETS_DIR, Mount, RunOptions
from sparkctl.profile.schema import Mode, Node, Profile
from sparkctl.secrets import SecretFile, SecretRef, masked

__all__ = ["SECRETS_DIR", "Mount", "RunOptions"]  # re-exported: callers import them from here

CONTAINER_HF_HOME = "/root/.cache/huggingface"
CONTAINER_TRITON = "/root/.triton"
LABEL_PREFIX = "sparkctl."


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

    def secret_refs(self) -> list[SecretRef]:
        return [f.ref for f in self.secrets]

    def env_masked(self) -> dict[str, str]:
        return {k: masked(v) for k, v in self.env.items()}

    def to_json(self) -> dict:
        out = asdict(self)
        out["env"] = self.env_masked()
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

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def api_base(self) -> str:
        return f"{self.url}/v1"


@dataclass(frozen=True)
class ContainerRef:
    node: str
    name: str
    mode: str


@dataclass(frozen=True)
class PlanFacts:
    """What only the nodes can tell (from preflight probes), needed to finish a plan."""

    hcas: dict[str, list[str]] = field(default_factory=dict)  # node -> RoCE devices (for hcas: auto)


@dataclass(frozen=True)
class Plan:
    cluster: str
    mode: str
    tp: int
    nnodes: int
    ranks: list[RankSpec]
    endpoint: Endpoint
    stop_first: list[ContainerRef]
    dist_init_addr: str | None
    config_hash: str
    image_source: str  # "ref" or "recipe:<name>"
    unresolved: list[str] = field(default_factory=list)  # what `up` must resolve first (e.g. hcas: auto)
    warnings: list[str] = field(default_factory=list)  # security notes `plan` shows (docs/security.md)

    @property
    def settled_hash(self) -> str | None:
        """The config hash running containers of this plan carry; None while something is
        unresolved (`hcas: auto` is read from the nodes at `up`, which changes the hash)."""
        return None if self.unresolved else self.config_hash

    @property
    def nodes(self) -> list[str]:
        return [r.node for r in self.ranks]

    def rank(self, n: int) -> RankSpec:
        return self.ranks[n]

    def to_json(self) -> dict:
        return {
            "cluster": self.cluster,
            "mode": self.mode,
            "tp": self.tp,
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
            "stop_first": [asdict(c) for c in self.stop_first],
            "unresolved": self.unresolved,
            "ranks": [r.to_json() for r in self.ranks],
        }


def container_name(cluster: str, mode: str, rank: int) -> str:
    return f"sparkctl-{cluster}-{mode}-r{rank}"


def node_home(node: Node, profile: Profile) -> str:
    """Home of the node's login user: the real one here, /root or /home/<user> on a peer."""
    if node.is_local:
        return str(Path.home())
    user = node.user or profile.ssh.user or getpass.getuser()
    return "/root" if user == "root" else f"/home/{user}"


def hf_cache_for(profile: Profile, node_name: str) -> str:
    """The node's HF cache path (node override, else the model default), `~` expanded per node."""
    node = profile.node(node_name)
    return node_path(node.hf_cache or profile.model.hf_cache, node, profile)


def node_path(path: str, node: Node, profile: Profile) -> str:
    if path == "~" or path.startswith("~/"):
        path = node_home(node, profile) + path[1:]
    if not posixpath.isabs(path):
        raise UsageError(f"path '{path}' on node {node.name} must be absolute (or start with ~/)")
    return posixpath.normpath(path)


def served_model_name(profile: Profile) -> str:
    return profile.engine.served_model_name or profile.model.target.id.rsplit("/", 1)[-1]


def _fabric_env(
    profile: Profile, node: Node, facts: PlanFacts, unresolved: list[str], engine_env: dict[str, str]
) -> dict[str, str]:
    assert node.fabric is not None  # schema guarantees it for multi-node modes
    ifnames = ",".join(node.fabric.netdevs)
    env = {"NCCL_SOCKET_IFNAME": ifnames, "GLOO_SOCKET_IFNAME": ifnames, **engine_env}
    if profile.fabric.transport == "tcp":
        env["NCCL_IB_DISABLE"] = "1"
        return env
    hcas = node.fabric.hcas
    if hcas == "auto":
        if node.name in facts.hcas:
            hcas = facts.hcas[node.name]
        else:
            unresolved.append(f"{node.name}: fabric.hcas is 'auto' (resolved from sysfs by preflight)")
            hcas = ["<auto>"]
    env["NCCL_IB_HCA"] = ",".join(hcas)
    return env


def _gpu_request(node: Node, per_rank: int, profile: Profile) -> str | None:
    if not profile.engine.container.gpus:
        return None
    return "all" if per_rank >= node.gpus else ",".join(str(i) for i in range(per_rank))


def _config_hash(ranks: list[RankSpec]) -> str:
    material = [
        {
            "rank": r.rank,
            "node": r.node,
            "image": r.image,
            "argv": r.argv,
            "env": {k: (repr(v) if isinstance(v, SecretRef) else v) for k, v in sorted(r.env.items())},
            "mounts": [asdict(m) for m in r.mounts],
            "secrets": [(f.target, f.yaml_key, repr(f.ref), f.bind) for f in r.secrets],
            "options": asdict(r.options),
        }
        for r in ranks
    ]
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:12]


def image_ref(profile: Profile) -> tuple[str, str]:
    if profile.image.ref:
        return profile.image.ref, "ref"
    return recipe_tag(profile.image.recipe or ""), f"recipe:{profile.image.recipe}"


def recipe_tag(recipe: str) -> str:
    """The tag `sparkctl image build RECIPE` gives its derivative by default (and a profile's
    `image.recipe` runs)."""
    return f"sparkctl/{recipe}:latest"


def _check_mode(profile: Profile, mode_name: str) -> None:
    if mode_name not in profile.modes:
        import difflib

        near = difflib.get_close_matches(mode_name, list(profile.modes), n=1)
        raise UsageError(
            f"unknown mode '{mode_name}'",
            fix=(f"did you mean '{near[0]}'? " if near else "")
            + f"modes in this profile: {', '.join(profile.modes)}",
        )


def _rank_env_mounts(
    profile: Profile,
    mode: Mode,
    node: Node,
    layout: RankLayout,
    engine: Engine,
    facts: PlanFacts,
    unresolved: list[str],
) -> tuple[dict[str, str | SecretRef], list[Mount], list[SecretFile]]:
    env: dict[str, str | SecretRef] = {"HF_HOME": CONTAINER_HF_HOME, "TRITON_CACHE_DIR": CONTAINER_TRITON}
    if mode.tp > 1:
        env |= {"NCCL_CUMEM_ENABLE": "0", "NCCL_NVLS_ENABLE": "0"}
    if layout.nnodes > 1:
        env |= _fabric_env(profile, node, facts, unresolved, engine.rank_env(profile, node, layout))
    if profile.engine.offline:
        env["HF_HUB_OFFLINE"] = "1"  # serve the snapshot `ship` put in the cache; never fetch code
    env |= profile.engine.env
    env |= mode.env
    secret_env, secret_mounts, secret_files = sec.secret_delivery(profile, node, node_path)
    env |= secret_env
    # Only the hub cache: $HF_HOME/token (the node user's login) stays out of the container.
    hf_hub = posixpath.join(node_path(node.hf_cache or profile.model.hf_cache, node, profile), "hub")
    triton = node_path(node.triton_cache or profile.model.triton_cache, node, profile)
    mounts = [Mount(hf_hub, f"{CONTAINER_HF_HOME}/hub"), Mount(triton, CONTAINER_TRITON), *secret_mounts]
    return env, mounts, secret_files


def build_plan(profile: Profile, mode_name: str | None = None, facts: PlanFacts | None = None) -> Plan:
    mode_name = mode_name or profile.default_mode()
    _check_mode(profile, mode_name)
    facts = facts or PlanFacts()
    mode = profile.modes[mode_name]
    nodes = [profile.node(n) for n in mode.nodes]
    nnodes = len(nodes)
    per_rank = mode.tp // nnodes
    image, image_source = image_ref(profile)
    unresolved: list[str] = []

    dist_init_addr = None
    if nnodes > 1:
        assert nodes[0].fabric is not None
        dist_init_addr = f"{nodes[0].fabric.ip}:{profile.fabric.dist_init_port}"

    engine = get_engine(profile.engine.kind)
    args = engine.serving_args(profile, mode)
    ranks: list[RankSpec] = []
    for rank, node in enumerate(nodes):
        layout = RankLayout(rank, nnodes, mode.tp, dist_init_addr, host=sec.bind_host(profile, node, rank))
        argv = engine.rank_argv(profile, args, layout)
        env, mounts, secret_files = _rank_env_mounts(profile, mode, node, layout, engine, facts, unresolved)
        options = sec.container_options(profile, mode, _gpu_request(node, per_rank, profile))
        name = container_name(profile.cluster, mode_name, rank)
        ranks.append(
            RankSpec(
                rank, node.name, name, image, argv, env, mounts, options, gpus=per_rank, secrets=secret_files
            )
        )

    config_hash = _config_hash(ranks)
    ranks = [
        RankSpec(
            **{
                **r.__dict__,
                "labels": {
                    f"{LABEL_PREFIX}cluster": profile.cluster,
                    f"{LABEL_PREFIX}mode": mode_name,
                    f"{LABEL_PREFIX}rank": str(r.rank),
                    f"{LABEL_PREFIX}node": r.node,
                    f"{LABEL_PREFIX}config_hash": config_hash,
                },
            }
        )
        for r in ranks
    ]

    stop_first = [
        ContainerRef(node=n, name=container_name(profile.cluster, other, i), mode=other)
        for other, other_mode in profile.modes.items()
        if other != mode_name
        for i, n in enumerate(other_mode.nodes)
    ]
    key = profile.engine.api_key
    endpoint = Endpoint(
        host=sec.endpoint_host(profile, nodes[0]),
        port=profile.engine.port,
        served_model_name=served_model_name(profile),
        api_key=sec.secret_ref("api-key", key, nodes[0], profile, node_path) if key else None,
    )
    return Plan(
        cluster=profile.cluster,
        mode=mode_name,
        tp=mode.tp,
        nnodes=nnodes,
        ranks=ranks,
        endpoint=endpoint,
        stop_first=stop_first,
        dist_init_addr=dist_init_addr,
        config_hash=config_hash,
        image_source=image_source,
        unresolved=unresolved,
        warnings=sec.plan_warnings(profile, mode),
    )
