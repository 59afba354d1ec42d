"""What sparkctl needs from a serving engine: its command line, env, readiness, flags and checks.

Everything engine-specific sits behind this protocol: planning/build.py renders argv/env through it
and refuses the flags it manages in the profile's args, preflight asks which env var carries the
advertised address and what memory fraction a command line asks for, readiness asks the paths.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sparkctl.connectors.pool import NodePool
    from sparkctl.engines.support.launch_check import LaunchCheck, LaunchRequest, Serving
    from sparkctl.facts.gpu import GpuReport
    from sparkctl.findings import Finding
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
class MetricNames:
    """The engine's Prometheus names `top` reads (None: the engine exports no such series) and the
    gauges whose sum is the requests a replica still serves (the rolling switch's drain)."""

    running: str | None = None  # gauge: requests being generated
    queued: str | None = None  # gauge: requests waiting for a slot
    token_usage: str | None = None  # gauge 0..1: KV-cache use
    gen_throughput: str | None = None  # gauge tok/s (used when no counter rate is known yet)
    accept_length: str | None = None  # gauge: speculative acceptance length
    accept_rate: str | None = None
    cache_hit_rate: str | None = None
    max_tokens: str | None = None
    prompt_tokens: str | None = None  # counters (with their _total suffix)
    generation_tokens: str | None = None
    requests: str | None = None
    aborted: str | None = None
    ttft: str | None = None  # histograms (base name)
    itl: str | None = None
    e2e: str | None = None
    in_flight: tuple[str, ...] = ()  # summed for the drain (an `endpoint` label of a probe is skipped)
    enable_flag: str | None = None  # the serving flag that turns /metrics on (None: always on)


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


@dataclass(frozen=True)
class LayoutFlags:
    """The flags whose values carry a rank's place in its group (its RankLayout): what a scheduler
    that places ranks itself (Kubernetes' LeaderWorkerSet, `export k8s`) fills in per pod."""

    nnodes: str  # takes the group's node count
    node_rank: str  # takes the rank inside the group
    dist_init_addr: str  # takes the group's rendezvous as host:port (only the host with dist_init_port)
    dist_init_port: str | None = None  # takes the rendezvous port, when the engine splits it (vLLM)


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
    name: str
    default_command: tuple[str, ...]  # the container command when engine.command is not set
    managed_flags: Mapping[str, str]  # flag -> the profile key sparkctl renders it from
    # Every long option of the engine's parser (no dashes): a profile key is resolved against it as
    # argparse would (an unambiguous prefix names its flag) before the managed-flag check.
    cli_flags: frozenset[str]
    # Regexes (group 1 kept, group 2 masked) for where the engine itself logs a key, e.g. its
    # settings at start: the rank log writer on the node masks them before any byte hits a file.
    log_secret_patterns: tuple[str, ...]
    host_ip_env: str | None  # env var with the address a rank advertises to its peers
    key_file: str  # in-container file the engine reads its API keys from (kept off argv)
    # Routes whose answer reveals a key or the settings (SGLang's /server_info): the filtering front
    # (node/front.py) refuses them, whatever the spelling of the path.
    private_routes: tuple[str, ...]
    # Of a private route's JSON, the fields a GET through the front still gets (scalars): what the
    # router reads of a worker. Empty: every private route is refused outright.
    private_route_fields: tuple[str, ...]
    default_user: str  # engine.container.user when unset: "node" where the engine serves as non-root
    readiness: Readiness
    metrics: MetricNames
    auth_keys: tuple[str, ...]  # keys of engine.api_key / admin_api_key the engine accepts
    image_markers: tuple[str, ...]  # image label/repository words that say an image runs this engine
    layout_flags: LayoutFlags  # where rank_argv puts nnodes, node rank and rendezvous
    # The profile's engine.<key> that records the engine's release (its rules are chosen by it;
    # `init` fills it from the image's label). None: the engine's checks take no release.
    version_key: str | None
    gb10_max_mem_fraction: float  # above it a GB10 (unified memory) can hard-reboot while loading
    mem_fraction_flag: str  # the flag (no dashes) that sets that fraction: what a memory fix names
    request_cap_flag: str  # the flag (no dashes) capping concurrent requests: what `top`'s KV hint names

    def serving_args(self, profile: Profile, mode: Mode) -> dict[str, ArgValue]:
        """The user's flags (engine.args, then mode.args) over the engine's serving defaults."""
        ...

    def rank_argv(self, profile: Profile, args: dict[str, ArgValue], layout: RankLayout) -> list[str]:
        """The full container command line of one rank."""
        ...

    def rank_env(self, profile: Profile, node: Node, layout: RankLayout) -> dict[str, str]:
        """Env only this engine needs (e.g. the advertised host address)."""
        ...

    def mem_fraction(self, argv: list[str]) -> float | None:
        """The static memory fraction a command line asks for (None: the engine's default)."""
        ...

    def launch_gate(self, profile: Profile) -> LaunchGate | None:
        """The engine's gated launch in the profile's release of it (None: no gate; starts run as
        before). The image's own parser confirms the flag (fit, plan --check, preflight)."""
        ...

    def check_names(self) -> frozenset[str]:
        """Stable finding names of `check` (valid in preflight --only/--ignore)."""
        ...

    def check(
        self,
        plan: LaunchTarget,
        profile: Profile,
        pool: NodePool | None = None,
        gpu_reports: Mapping[str, GpuReport | None] | None = None,
    ) -> list[Finding]:
        """Launch safety for preflight: flags (the image's parser on rank 0 when `pool` is given),
        rules and the memory planner, with the GPU reports preflight already probed."""
        ...

    def launch_check(self, plan: LaunchTarget, profile: Profile, request: LaunchRequest) -> LaunchCheck:
        """`fit` and `plan --check`: the same launch safety as `check`, reaching the nodes itself as
        far as `request` allows (GPU probes, the parser in the image), with the engine's memory
        plan and the flag fixes it proposes."""
        ...

    def memory_plan(
        self, profile: Profile, argv: list[str], node: str, fraction: float, available: int
    ) -> Serving | None:
        """What one rank's argv serves with `fraction` of `available` bytes (unified memory): the
        admission before a start names it in its fix. None: not modelled, or the model's facts are
        not on this machine."""
        ...


def render_args(args: dict[str, ArgValue]) -> list[str]:
    """Mapping -> argparse flags, as both engines' parsers take them: True = bare flag,
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


def fabric_host_env(host_ip_env: str | None, node: Node, layout: RankLayout) -> dict[str, str]:
    """The address a rank of a multi-node group advertises to its peers: its fabric IP."""
    if host_ip_env and layout.nnodes > 1 and node.fabric is not None:
        return {host_ip_env: str(node.fabric.ip)}
    return {}
