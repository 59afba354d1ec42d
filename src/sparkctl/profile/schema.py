"""The cluster profile: pydantic v2 models, every model `extra="forbid"`.

Validation covers the whole file before any connection is opened: cross-references (modes -> nodes),
TP vs the GPUs of a mode's nodes, and secrets kept out of plain env; the flags an engine manages are
refused when the plan is built (planning/build.py), so the profile imports no engine. docs/profile.md.
"""

from __future__ import annotations

from ipaddress import IPv4Address
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from sparkctl.profile.base import DEFAULT_ENGINE, ENGINE_KINDS, FRONT_HELP, INTERNAL_PORT_HELP, Port, Strict
from sparkctl.profile.memory import Memory
from sparkctl.profile.router import Router
from sparkctl.profile.security import ContainerOptions, ImageRef, ModelId, NodeDir, Revision, ssh_word
from sparkctl.profile.values import ArgValue, check_args, check_env, check_log_dir, one_line, release_keys

NAME_RE = r"^[a-z0-9][a-z0-9_.-]*$"
Name = Annotated[str, Field(pattern=NAME_RE, max_length=40)]


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
    gpus: int = Field(1, ge=0, description="GPUs on this node; a mode's tp must fit in them.")
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


class Image(Strict):
    ref: ImageRef | None = Field(None, description="Image reference on the nodes, e.g. sglang-dflash:spark.")
    id: Annotated[str | None, Field(pattern=r"^sha256:[0-9a-f]{64}$")] = None
    recipe: str | None = Field(None, description="Name of an images/<recipe>/ to build instead of a ref.")

    @model_validator(mode="after")
    def _ref_or_recipe(self) -> Image:
        if bool(self.ref) == bool(self.recipe):
            raise ValueError("set exactly one of image.ref or image.recipe")
        return self


class ModelRef(Strict):
    id: ModelId = Field(description="Hugging Face repo id, e.g. org/name.")
    revision: Revision | None = Field(
        None, description="Commit or branch; pin it so every node serves the same bytes."
    )
    local_dir: str | None = Field(
        None,
        description="config.json + safetensors here, for `fit` planning when the HF cache lacks the model.",
    )


class Model(Strict):
    target: ModelRef = Field(description="The served model.")
    draft: ModelRef | None = Field(
        None, description="DFlash draft model; enables --speculative-algorithm DFLASH."
    )
    hf_cache: NodeDir = Field(
        "~/.cache/huggingface", description="HF cache on every node, mounted as HF_HOME."
    )
    triton_cache: NodeDir = Field(
        "~/.triton", description="Triton kernel cache: keeps warm-up across restarts."
    )


class Secret(Strict):
    """A secret's source. The value is read at execution time and never stored or printed."""

    env: str | None = Field(None, description="Read from this variable of the shell running sparkctl.")
    file: str | None = Field(None, description="A 0400 file present on every node; mounted read-only.")

    @model_validator(mode="after")
    def _one_source(self) -> Secret:
        if bool(self.env) == bool(self.file):
            raise ValueError("set exactly one of env or file")
        return self


class Engine(Strict):
    kind: Literal[ENGINE_KINDS] = Field(DEFAULT_ENGINE, description="Serving engine (sparkctl.engines).")  # type: ignore[valid-type]
    command: list[str] | None = Field(
        None,
        min_length=1,
        description="The rank's launcher, run in place of the image's ENTRYPOINT/CMD (default: the engine's).",
    )
    host: str | None = Field(
        None,
        description="--host of the API server (default: each node's IP, its name resolved on that node by `up`; "
        "127.0.0.1 for a local node). Without api_key, anything but loopback needs expose: public.",
    )
    expose: Literal["private", "public"] = Field(
        "private", description="public: an API without a key on a non-loopback address is intended."
    )
    api_key: Secret | None = Field(None, description="Bearer key the OpenAI API requires (passed in a file).")
    admin_api_key: Secret | None = Field(
        None, description="Key for the engine's admin routes (SGLang's; else they take api_key, or no key)."
    )
    trust_remote_code: bool = Field(
        False, description="Let the model repo run its own Python (--trust-remote-code); pin the revision."
    )
    offline: bool = Field(
        True, description="HF_HUB_OFFLINE=1 in the container: serve the shipped snapshot, never fetch."
    )
    port: Port = Field(30000, description="--port of the API server (rank 0).")
    front: bool = Field(True, description=FRONT_HELP)
    internal_port: Port | None = Field(None, description=INTERNAL_PORT_HELP)
    served_model_name: str | None = Field(
        None, description="Name clients use (default: last part of the model id)."
    )
    recipe_defaults: bool = Field(True, description="Add the reference recipe's serving defaults.")
    args: dict[str, ArgValue] = Field(
        default_factory=dict,
        description="The engine's flags without dashes: true = bare flag, false/null = omit, list = values.",
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra container env (no secrets here).")
    secrets: dict[str, Secret] = Field(
        default_factory=dict, description="Secret env such as HF_TOKEN, by source."
    )
    container: ContainerOptions = Field(default_factory=ContainerOptions, description="docker run options.")
    options: dict[str, ArgValue] = Field({}, description="Keys of the engine's own (docs/engines.md).")
    ready_timeout: float = Field(1800.0, gt=0, description="Seconds `up` waits for the endpoint.")
    log_dir: str = Field("~/.local/state/sparkctl/logs", description="Per-node directory of rank log files.")
    stop_grace: int = Field(
        5, ge=0, le=300, description="Seconds between SIGTERM and SIGKILL when `down`/`switch` stop a rank."
    )

    @field_validator("args")
    @classmethod
    def _args(cls, v: dict[str, ArgValue]) -> dict[str, ArgValue]:
        return check_args(v)

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        return check_env(v)

    @field_validator("log_dir")
    @classmethod
    def _log_dir(cls, v: str) -> str:
        return check_log_dir(v)

    @field_validator("served_model_name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        return v if v is None else one_line("served_model_name", v)

    @model_validator(mode="after")
    def _admin_needs_api_key(self) -> Engine:
        # Only an admin key: normal routes stay open, the settings route (which answers it) among them.
        if self.admin_api_key is not None and self.api_key is None:
            raise ValueError(
                "admin_api_key: set api_key too (with only an admin key the API is open and "
                "/server_info hands that admin key to anyone)"
            )
        return self


class Mode(Strict):
    nodes: list[str] = Field(
        min_length=1,
        description="Node names, cut in order into replica groups; a group's first is its rank 0.",
    )
    tp: int = Field(1, ge=1, description="Tensor parallel size of one replica, over its nodes.")
    pp: int = Field(1, ge=1, description="Pipeline parallel size of one replica.")
    replicas: int = Field(
        1,
        ge=1,
        description="Independent copies of the model behind the router (data parallel): "
        "nodes split into this many groups, or several per node on its GPUs.",
    )
    args: dict[str, ArgValue] = Field(default_factory=dict, description="Flags merged over engine.args.")
    env: dict[str, str] = Field(default_factory=dict, description="Env merged over engine.env.")
    default: bool = Field(False, description="The mode used when a command names none.")

    @field_validator("args")
    @classmethod
    def _args(cls, v: dict[str, ArgValue]) -> dict[str, ArgValue]:
        return check_args(v)

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        return check_env(v)

    @property
    def nodes_per_replica(self) -> int:
        """Nodes one replica spans (1 when replicas share or split single nodes)."""
        return max(1, len(self.nodes) // self.replicas)


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

    @model_validator(mode="after")
    def _cross_refs(self) -> Profile:
        names = [n.name for n in self.nodes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            where = f"nodes[{names.index(dupes[0], names.index(dupes[0]) + 1)}].name"
            raise ValueError(f"{where}: duplicate node name(s): {', '.join(dupes)}")
        by_name = {n.name: n for n in self.nodes}
        ips: dict[str, str] = {}
        for i, n in enumerate(self.nodes):
            ip = str(n.fabric.ip) if n.fabric else None
            if ip in ips:
                raise ValueError(
                    f"nodes[{i}].fabric.ip: {ip} is also {ips[ip]}'s; each node has its own fabric address"
                )
            if ip:
                ips[ip] = n.name
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
            _check_layout(self, mode_name, mode, by_name)
        if self.router.node is not None and self.router.node not in by_name:
            raise ValueError(f"router.node: unknown node '{self.router.node}' (nodes: {', '.join(names)})")
        return self

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def default_mode(self) -> str:
        for name, mode in self.modes.items():
            if mode.default:
                return name
        return next(iter(self.modes))


# The mode key each topology rule is about, so an error points at its line in the YAML.
_RULE_KEYS = {
    "gpus-per-node": "tp",
    "nodes-divide-tp-pp": "tp",
    "sizes-positive": "tp",
    "replicas-divide-nodes": "replicas",
    "replicas-positive": "replicas",
    "node-once": "nodes",
}


def _check_layout(profile: Profile, mode_name: str, mode: Mode, by_name: dict[str, Node]) -> None:
    """The topology rules (sparkctl.profile.topology), each error naming its rule; then the fabric that
    every group spanning several nodes needs."""
    from sparkctl.profile.topology import TopologyError, mode_layout

    where = f"modes.{mode_name}"
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
