"""What sparkctl needs from every serving engine (the core), and the plain types it is planned with.

The core: its name, default command, managed flags, serving args, one rank's argv and env, its
readiness. What an engine may lack is a capability (engines/capabilities.py: auth, memory model,
metrics, layout flags, multi-node, image markers, launch checks, NCCL library variable, options):
an attribute that is None where the engine has none, and each caller handles its absence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pydantic import BaseModel

    from sparkctl.engines.capabilities import (
        Auth,
        ImageMarkers,
        LaunchSafety,
        LayoutFlags,
        MemoryModel,
        MetricNames,
        MultiNode,
    )
    from sparkctl.profile.schema import ArgValue, Mode, Node, Profile


@dataclass(frozen=True)
class Readiness:
    """How to tell the HTTP server is up, then that it really serves (see lifecycle/readiness.py)."""

    models_path: str = "/v1/models"  # static metadata: answers before warm-up ends
    health_path: str = "/health"  # a real generation on rank 0
    health_timeout: float = 25.0  # SGLang's own health generation times out after 20 s
    # The models answer names the served model. Not so for sglang-router's: it learns names from
    # SGLang's /model_info and lists "unknown" for any other engine's workers (vLLM's).
    names_served: bool = True


@dataclass(frozen=True)
class RankLayout:
    """Where one rank sits in its replica group: what the engine's parallel flags are rendered from."""

    rank: int  # the node rank inside its group (SGLang --node-rank)
    nnodes: int  # nodes of its group
    tp: int
    dist_init_addr: str | None  # the group's rendezvous (None for a single-node group)
    host: str = (
        "0.0.0.0"  # the address this rank binds (hardening.bind_host: the API only on rank 0's choice)
    )
    port: int = 30000  # the group's API port
    pp: int = 1
    gate_port: int | None = None  # the group's launch gate (LaunchGate): every rank blocks there
    # The other ranks' fabric addresses, in rank order: filled only for an engine whose
    # multi-node capability says its ranks need them (MultiNode.peers: RPC workers).
    peers: tuple[str, ...] = ()
    # HF_HOME inside the container (planning's, for the user the rank runs as): where an engine
    # that opens its weights by path (llama.cpp's GGUF file) finds the shipped snapshot.
    hf_home: str = "/root/.cache/huggingface"


@dataclass(frozen=True)
class LaunchGate:
    """An engine's gated launch: every rank blocks after the distributed rendezvous, before any
    sizable GPU allocation, until the orchestrator opens the gate. Rank 0 alone serves the gate's
    control HTTP server on its --host and `flag`'s port; the rendezvous is done (every rank joined)
    once `health_path` answers there. Nothing authenticates `activate_path`."""

    flag: str  # the launch flag that takes the gate's port
    health_path: str  # GET: 200 once rank 0 waits at the gate (so every rank has rendezvoused)
    activate_path: str  # POST: opens the gate on every rank
    waiting_marker: str  # each rank's log line while it waits
    activated_marker: str  # each rank's log line once the gate opened
    release: str  # the engine release it was read in (what the plan says it relies on)


class LaunchRank(Protocol):
    """What a launch check reads of one planned rank (planning's RankSpec has these)."""

    node: str
    image: str
    argv: list[str]


class LaunchTarget(Protocol):
    """What a launch check reads of a plan: its ranks and nodes (planning's Plan is one). The engine
    floor sits below planning, so it names only these fields, never the Plan type."""

    @property
    def ranks(self) -> Sequence[LaunchRank]: ...

    @property
    def nodes(self) -> list[str]: ...


class Engine(Protocol):
    """The core every engine has, plus its capability attributes (None: absent)."""

    name: str
    default_command: tuple[str, ...]  # the container command when engine.command is not set
    managed_flags: Mapping[str, str]  # flag -> the profile key sparkctl renders it from
    # Every long option of the engine's parser (no dashes): a profile key is resolved against it as
    # argparse would (an unambiguous prefix names its flag) before the managed-flag check. Empty:
    # the parser takes no abbreviations.
    cli_flags: frozenset[str]
    default_user: str  # engine.container.user when unset: "node" where the engine serves as non-root
    readiness: Readiness
    # Routes whose answer reveals a key or the settings (SGLang's /server_info): never among the
    # gateway's allowed routes (planning/gateway.py), and named in `export k8s`'s notes.
    private_routes: tuple[str, ...]
    # Of a private route's JSON, the fields the router reads of a worker (scalars). Empty: every
    # private route is refused outright.
    private_route_fields: tuple[str, ...]

    # Capabilities (engines/capabilities.py): None where the engine lacks one.
    auth: Auth | None
    memory: MemoryModel | None
    metrics: MetricNames | None
    layout_flags: LayoutFlags | None
    multi_node: MultiNode | None
    images: ImageMarkers | None
    launch: LaunchSafety | None
    nccl_library_env: str | None
    options: type[BaseModel] | None

    def serving_args(self, profile: Profile, mode: Mode) -> dict[str, ArgValue]:
        """The user's flags (engine.args, then mode.args) over the engine's serving defaults."""
        ...

    def rank_argv(self, profile: Profile, args: dict[str, ArgValue], layout: RankLayout) -> list[str]:
        """The full container command line of one rank."""
        ...

    def rank_env(self, profile: Profile, node: Node, layout: RankLayout) -> dict[str, str]:
        """Env only this engine needs (e.g. the advertised host address)."""
        ...

    def launch_gate(self, profile: Profile) -> LaunchGate | None:
        """The engine's gated launch in the profile's release of it (a capability: None, the
        default of `Capabilities`, where it has none and starts run as before)."""
        ...


def render_args(args: dict[str, ArgValue]) -> list[str]:
    """Mapping -> long flags, as the engines' parsers take them: True = bare flag,
    False/None = omitted, list = repeated values."""
    out: list[str] = []
    for key, value in args.items():
        if value is None or value is False:
            continue
        out.append(f"--{key}")
        if value is True:
            continue
        values = value if isinstance(value, list) else [value]
        out.extend(str(v) for v in values)
    return out


def launcher(profile: Profile, default: tuple[str, ...]) -> list[str]:
    """The program and words a rank's argv starts with: `engine.command`, else the engine's own.
    The container runs the argv whole in place of the image's ENTRYPOINT/CMD, so it must name a
    program: the older workaround that passed flags to the image's entrypoint no longer applies."""
    command = list(profile.engine.command or default)
    if command[0].startswith("-"):
        from sparkctl.errors import ProfileError

        raise ProfileError(
            f"engine.command: {command!r} starts with a flag; it is the whole launcher now, run in "
            "place of the image's ENTRYPOINT",
            fix=f"leave engine.command unset (the engine's {' '.join(default)}), or start it with the program",
        )
    return command


def fabric_host_env(multi: MultiNode | None, node: Node, layout: RankLayout) -> dict[str, str]:
    """The address a rank of a multi-node group advertises to its peers (in the engine's
    MultiNode.host_ip_env): its fabric IP."""
    env = multi.host_ip_env if multi else None
    if env and layout.nnodes > 1 and node.fabric is not None:
        return {env: str(node.fabric.ip)}
    return {}
