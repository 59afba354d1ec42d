"""The pure planning step: profile + mode (+ discovered facts) -> exactly what runs on every rank.

No I/O happens here. `sparkctl plan` prints a Plan and `sparkctl up` executes the very same
object, so what the user reviewed is what runs. The config hash covers everything that reaches
a container (image, argv, env, mounts, options), so `up` can tell "already running" from "changed".
"""

from __future__ import annotations

import dataclasses
import getpass
import hashlib
import json
import posixpath
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sparkctl.engines import get_engine
from sparkctl.engines.base import Engine, RankLayout
from sparkctl.errors import UsageError
from sparkctl.profile.schema import ArgValue, Mode, Node, Profile
from sparkctl.secrets import SecretRef, masked

CONTAINER_HF_HOME = "/root/.cache/huggingface"
CONTAINER_TRITON = "/root/.triton"
SECRETS_DIR = "/run/secrets"
LABEL_PREFIX = "sparkctl."

@dataclass(frozen=True)
class Mount:
    source: str  # path on the node
    target: str  # path in the container
    read_only: bool = False


@dataclass(frozen=True)
class RunOptions:
    """`docker run` options of one rank: the profile's engine.container resolved (GPU ids, host net)."""

    network_mode: str = "host"
    ipc_mode: str = "host"
    shm_size: str = "32g"
    privileged: bool = False
    gpus: str | None = "all"  # "all", "0,1" (device ids) or None for no GPU request


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

    def env_masked(self) -> dict[str, str]:
        return {k: masked(v) for k, v in self.env.items()}

    def to_json(self) -> dict:
        out = asdict(self)
        out["env"] = self.env_masked()
        return out


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    served_model_name: str

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
            "endpoint": {**asdict(self.endpoint), "url": self.endpoint.url},
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


def _secret_env_and_mounts(profile: Profile, node: Node) -> tuple[dict[str, str | SecretRef], list[Mount]]:
    env: dict[str, str | SecretRef] = {}
    mounts: list[Mount] = []
    for name, secret in profile.engine.secrets.items():
        if secret.env:
            env[name] = SecretRef(name=name, env=secret.env)
        else:
            target = f"{SECRETS_DIR}/{name}"
            mounts.append(Mount(node_path(secret.file or "", node, profile), target, read_only=True))
            env[f"{name}_PATH"] = target
    return env, mounts


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


def _rank_spec(
    profile: Profile,
    mode: Mode,
    node: Node,
    layout: RankLayout,
    engine: Engine,
    args: dict[str, ArgValue],
    facts: PlanFacts,
    unresolved: list[str],
) -> RankSpec:
    """One rank's command, env, mounts and docker options (name and image are filled by the caller)."""
    argv = engine.rank_argv(profile, args, layout)
    env: dict[str, str | SecretRef] = {"HF_HOME": CONTAINER_HF_HOME, "TRITON_CACHE_DIR": CONTAINER_TRITON}
    if mode.tp > 1:
        env |= {"NCCL_CUMEM_ENABLE": "0", "NCCL_NVLS_ENABLE": "0"}
    if layout.nnodes > 1:
        env |= _fabric_env(profile, node, facts, unresolved, engine.rank_env(profile, node, layout))
    env |= profile.engine.env
    env |= mode.env
    secret_env, secret_mounts = _secret_env_and_mounts(profile, node)
    env |= secret_env
    mounts = [
        Mount(hf_cache_for(profile, node.name), CONTAINER_HF_HOME),
        Mount(node_path(node.triton_cache or profile.model.triton_cache, node, profile), CONTAINER_TRITON),
        *secret_mounts,
    ]
    per_rank = mode.tp // layout.nnodes
    opts = profile.engine.container
    options = RunOptions(
        shm_size=opts.shm_size, privileged=opts.privileged, gpus=_gpu_request(node, per_rank, profile)
    )
    return RankSpec(
        rank=layout.rank,
        node=node.name,
        container_name="",
        image="",
        argv=argv,
        env=env,
        mounts=mounts,
        options=options,
        gpus=per_rank,
    )


def build_plan(profile: Profile, mode_name: str | None = None, facts: PlanFacts | None = None) -> Plan:
    mode_name = mode_name or profile.default_mode()
    if mode_name not in profile.modes:
        import difflib

        near = difflib.get_close_matches(mode_name, list(profile.modes), n=1)
        raise UsageError(
            f"unknown mode '{mode_name}'",
            fix=(f"did you mean '{near[0]}'? " if near else "")
            + f"modes in this profile: {', '.join(profile.modes)}",
        )
    facts = facts or PlanFacts()
    mode = profile.modes[mode_name]
    nodes = [profile.node(n) for n in mode.nodes]
    nnodes = len(nodes)
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
        layout = RankLayout(rank=rank, nnodes=nnodes, tp=mode.tp, dist_init_addr=dist_init_addr)
        spec = _rank_spec(profile, mode, node, layout, engine, args, facts, unresolved)
        name = container_name(profile.cluster, mode_name, rank)
        ranks.append(dataclasses.replace(spec, container_name=name, image=image))

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
    rank0 = nodes[0]
    host = "127.0.0.1" if rank0.is_local else rank0.address
    endpoint = Endpoint(host=host, port=profile.engine.port, served_model_name=served_model_name(profile))
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
    )
