"""The cluster profile: pydantic v2 models, every model `extra="forbid"`.

Validation covers the whole file before any connection is opened: cross-references (modes ->
nodes), TP vs the GPUs of a mode's nodes, flags sparkctl manages itself, and secrets kept out of
plain env. Documented key by key in docs/profile.md.
"""

from __future__ import annotations

import re
from ipaddress import IPv4Address
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

NAME_RE = r"^[a-z0-9][a-z0-9_.-]*$"
Name = Annotated[str, Field(pattern=NAME_RE, max_length=40)]
Port = Annotated[int, Field(ge=1, le=65535)]
ArgValue = str | int | float | bool | None | list[str | int | float]

# Flags sparkctl derives from the profile; setting them in `args` would contradict the plan.
MANAGED_FLAGS = {
    "model-path": "model.target.id",
    "revision": "model.target.revision",
    "served-model-name": "engine.served_model_name",
    "host": "engine.host",
    "port": "engine.port",
    "tp": "modes.<mode>.tp",
    "tp-size": "modes.<mode>.tp",
    "tensor-parallel-size": "modes.<mode>.tp",
    "nnodes": "modes.<mode>.nodes",
    "node-rank": "modes.<mode>.nodes (order = rank)",
    "dist-init-addr": "fabric.dist_init_port and the rank-0 node's fabric.ip",
    "nccl-init-addr": "fabric.dist_init_port and the rank-0 node's fabric.ip",
    "speculative-draft-model-path": "model.draft.id",
    "speculative-draft-model-revision": "model.draft.revision",
}
SECRET_NAME_RE = re.compile(r"(TOKEN|SECRET|PASSWORD|API_KEY|ACCESS_KEY)", re.IGNORECASE)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuFacts(Strict):
    """What a node's GPUs are, for planning without touching the node (preflight probes the truth)."""

    name: str
    memory_gib: float = Field(gt=0, description="Per GPU; on unified-memory boxes the usable total.")
    compute_capability: Annotated[str, Field(pattern=r"^\d+\.\d+$")]
    unified_memory: bool = False


class NodeFabric(Strict):
    netdevs: list[str] = Field(min_length=1, description="Fabric netdev(s), e.g. enp1s0f1np1.")
    ip: IPv4Address
    hcas: Literal["auto"] | list[str] = "auto"


class Node(Strict):
    name: Name
    address: str = Field(description="SSH host (or ~/.ssh/config alias); 'local' runs here without SSH.")
    user: str | None = None
    port: Port | None = None
    key: str | None = None
    gpus: int = Field(1, ge=0)
    gpu: GpuFacts | None = None
    fabric: NodeFabric | None = None
    hf_cache: str | None = None
    triton_cache: str | None = None

    @property
    def is_local(self) -> bool:
        return self.address == "local"


class SshSettings(Strict):
    known_hosts: str = "~/.ssh/known_hosts"
    host_key_policy: Literal["strict", "accept-new"] = "strict"
    connect_timeout: float = Field(10.0, gt=0, le=300)
    user: str | None = None
    key: str | None = None
    port: Port = 22


class Fabric(Strict):
    mtu: int = Field(9000, ge=576, le=9216)
    transport: Literal["roce", "tcp"] = "roce"
    dist_init_port: Port = 50051


class Image(Strict):
    ref: str | None = None
    id: Annotated[str | None, Field(pattern=r"^sha256:[0-9a-f]{64}$")] = None
    recipe: str | None = Field(None, description="Name of an images/<recipe>/ to build instead of a ref.")

    @model_validator(mode="after")
    def _ref_or_recipe(self) -> Image:
        if bool(self.ref) == bool(self.recipe):
            raise ValueError("set exactly one of image.ref or image.recipe")
        return self


class ModelRef(Strict):
    id: str = Field(description="Hugging Face repo id, e.g. org/name.")
    revision: str | None = None


class Model(Strict):
    target: ModelRef
    draft: ModelRef | None = None
    hf_cache: str = "~/.cache/huggingface"
    triton_cache: str = "~/.triton"


class Secret(Strict):
    """A secret's source. The value is read at execution time and never stored or printed."""

    env: str | None = Field(None, description="Read from this variable of the shell running sparkctl.")
    file: str | None = Field(None, description="A 0400 file present on every node; mounted read-only.")

    @model_validator(mode="after")
    def _one_source(self) -> Secret:
        if bool(self.env) == bool(self.file):
            raise ValueError("set exactly one of env or file")
        return self


class ContainerOptions(Strict):
    shm_size: Annotated[str, Field(pattern=r"^\d+[bkmg]?$")] = "32g"
    privileged: bool = False
    gpus: bool = Field(
        True, description="Request the node's GPUs via the NVIDIA runtime (false on CPU-only rigs)."
    )


def _check_args(args: dict[str, ArgValue]) -> dict[str, ArgValue]:
    clean: dict[str, ArgValue] = {}
    for key, value in args.items():
        flag = key.lstrip("-").replace("_", "-")
        if flag in MANAGED_FLAGS:
            raise ValueError(f"{key}: '{key}' is set by sparkctl from {MANAGED_FLAGS[flag]}; set it there")
        clean[flag] = value
    return clean


def _check_env(env: dict[str, str]) -> dict[str, str]:
    for key in env:
        if SECRET_NAME_RE.search(key):
            raise ValueError(
                f"{key}: '{key}' looks like a secret; declare it under engine.secrets "
                f"(env: or file:) so it is never stored or printed"
            )
    return env


class Engine(Strict):
    command: list[str] = Field(
        default_factory=lambda: ["python3", "-m", "sglang.launch_server"], min_length=1
    )
    host: str = "0.0.0.0"
    port: Port = 30000
    served_model_name: str | None = None
    recipe_defaults: bool = Field(True, description="Add the reference recipe's serving defaults.")
    args: dict[str, ArgValue] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    secrets: dict[str, Secret] = Field(default_factory=dict)
    container: ContainerOptions = Field(default_factory=ContainerOptions)
    sglang_version: str | None = Field(None, description="SGLang release in the image, for rule selection.")
    ready_timeout: float = Field(1800.0, gt=0, description="Seconds `up` waits for the endpoint.")
    log_dir: str = Field("~/.local/state/sparkctl/logs", description="Per-node directory of rank log files.")

    @field_validator("args")
    @classmethod
    def _args(cls, v: dict[str, ArgValue]) -> dict[str, ArgValue]:
        return _check_args(v)

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        return _check_env(v)


class Mode(Strict):
    nodes: list[str] = Field(min_length=1, description="Node names; the first is rank 0.")
    tp: int = Field(1, ge=1)
    args: dict[str, ArgValue] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    default: bool = False

    @field_validator("args")
    @classmethod
    def _args(cls, v: dict[str, ArgValue]) -> dict[str, ArgValue]:
        return _check_args(v)

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        return _check_env(v)


class Profile(Strict):
    version: Literal[1] = 1
    cluster: Name
    ssh: SshSettings = Field(default_factory=SshSettings)
    fabric: Fabric = Field(default_factory=Fabric)
    nodes: list[Node] = Field(min_length=1)
    image: Image
    model: Model
    engine: Engine = Field(default_factory=Engine)
    modes: dict[Name, Mode] = Field(min_length=1)

    @model_validator(mode="after")
    def _cross_refs(self) -> Profile:
        names = [n.name for n in self.nodes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            where = f"nodes[{names.index(dupes[0], names.index(dupes[0]) + 1)}].name"
            raise ValueError(f"{where}: duplicate node name(s): {', '.join(dupes)}")
        by_name = {n.name: n for n in self.nodes}
        defaults = [m for m, mode in self.modes.items() if mode.default]
        if len(defaults) > 1:
            raise ValueError(
                f"modes.{defaults[1]}.default: more than one default mode: {', '.join(defaults)}"
            )
        for mode_name, mode in self.modes.items():
            where = f"modes.{mode_name}"
            for i, node in enumerate(mode.nodes):
                if node not in by_name:
                    import difflib

                    near = difflib.get_close_matches(node, names, n=1)
                    hint = f" (did you mean '{near[0]}'?)" if near else f" (nodes: {', '.join(names)})"
                    raise ValueError(f"{where}.nodes[{i}]: unknown node '{node}'{hint}")
            if len(set(mode.nodes)) != len(mode.nodes):
                raise ValueError(f"{where}.nodes: a node is listed twice")
            if mode.tp % len(mode.nodes):
                raise ValueError(
                    f"{where}.tp: tp={mode.tp} does not split evenly over {len(mode.nodes)} node(s)"
                )
            per_node = mode.tp // len(mode.nodes)
            for node in mode.nodes:
                have = by_name[node].gpus
                if per_node > have:
                    raise ValueError(
                        f"{where}.tp: tp={mode.tp} needs {per_node} GPU(s) on node '{node}', "
                        f"which has gpus: {have}"
                    )
            if len(mode.nodes) > 1:
                for node in mode.nodes:
                    if by_name[node].fabric is None:
                        raise ValueError(
                            f"{where}.nodes: spans several nodes, so node '{node}' needs a "
                            f"fabric: {{netdevs, ip}} section"
                        )
        return self

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def default_mode(self) -> str:
        for name, mode in self.modes.items():
            if mode.default:
                return name
        return next(iter(self.modes))
