"""What an engine may have beyond the core (engines/base.py): one record per capability.

An engine sets the attribute of each capability it has (`Capabilities` gives every one None) and
callers handle its absence: no `auth`, no API key in the profile; no `memory`, no fraction to cap
or admit by; no `metrics`, `top` shows no engine line; no `multi_node`, every replica on one node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from pydantic import BaseModel

    from sparkctl.connectors.pool import NodePool
    from sparkctl.engines.base import LaunchGate, LaunchTarget
    from sparkctl.engines.support.launch_check import LaunchCheck, LaunchRequest, Serving
    from sparkctl.facts.gpu import GpuReport
    from sparkctl.findings import Finding
    from sparkctl.profile.schema import Profile


@dataclass(frozen=True)
class Auth:
    """The engine checks API keys: which of the profile's it takes, and the file it reads them from."""

    keys: tuple[str, ...]  # of "api-key" (engine.api_key) and "admin-api-key" (engine.admin_api_key)
    key_file: str  # in-container file the engine reads its keys from (kept off argv)
    # yaml: `api-key: "..."` lines (a --config file); plain: the key alone (one key a file)
    key_format: Literal["yaml", "plain"] = "yaml"
    # Regexes (group 1 kept, group 2 masked) for where the engine itself logs a key, e.g. its
    # settings at start: the rank log writer on the node masks them before any byte hits a file.
    log_secret_patterns: tuple[str, ...] = ()

    def yaml_key(self, key: str) -> str | None:
        """The key's name in a YAML key file; None where the file holds the key alone."""
        return key if self.key_format == "yaml" else None


@dataclass(frozen=True)
class MemoryModel:
    """The engine reserves a static fraction of GPU memory: what the unified-memory checks
    (preflight UnifiedMemory, up's admission) cap and admit by, and `top`'s hints name."""

    flag: str  # the flag (no dashes) that sets the fraction: what a memory fix names
    gb10_max: float  # above it a GB10 (unified memory) can hard-reboot while loading
    fraction: Callable[[list[str]], float | None]  # what a command line asks for (None: the default)
    request_cap_flag: str | None = None  # the flag (no dashes) capping concurrent requests
    # What one rank's argv serves with a fraction of the available bytes (profile, argv, node,
    # fraction, available): the admission names it in its fix. None: no request count modelled.
    serving: Callable[[Profile, list[str], str, float, int], Serving | None] | None = None


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
class LayoutFlags:
    """The flags whose values carry a rank's place in its group (its RankLayout): what a scheduler
    that places ranks itself (Kubernetes' LeaderWorkerSet, `export k8s`) fills in per pod."""

    nnodes: str  # takes the group's node count
    node_rank: str  # takes the rank inside the group
    dist_init_addr: str  # takes the group's rendezvous as host:port (only the host with dist_init_port)
    dist_init_port: str | None = None  # takes the rendezvous port, when the engine splits it (vLLM)


@dataclass(frozen=True)
class MultiNode:
    """The engine runs one replica over several nodes (one rank per node)."""

    host_ip_env: str | None = None  # env var with the address a rank advertises to its peers
    # The ranks need each other's fabric addresses (RankLayout.peers: RPC workers), not only a
    # rendezvous on rank 0.
    peers: bool = False


@dataclass(frozen=True)
class ImageMarkers:
    """How `init` recognises the engine's images and where their release goes in the profile."""

    markers: tuple[str, ...]  # image label/repository words that say an image runs this engine
    # The engine.options key that records the engine's release (its rules are chosen by it;
    # `init` fills it from the image's label). None: the engine's checks take no release.
    version_key: str | None = None


class LaunchSafety(Protocol):
    """The engine's launch checks: preflight's `Launch`, `fit` and `plan --check`."""

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
        far as `request` allows, with the engine's memory plan and the flag fixes it proposes."""
        ...


class Capabilities:
    """Every capability absent: an engine class inherits this and sets the ones it has."""

    auth: Auth | None = None
    memory: MemoryModel | None = None
    metrics: MetricNames | None = None
    layout_flags: LayoutFlags | None = None  # where rank_argv puts nnodes, node rank and rendezvous
    multi_node: MultiNode | None = None
    images: ImageMarkers | None = None
    launch: LaunchSafety | None = None
    nccl_library_env: str | None = None  # the env var naming the libnccl the engine's own wrapper loads
    # The engine's model of `engine.options` (its own profile keys, checked when the plan is built).
    # None: the engine takes no options.
    options: type[BaseModel] | None = None

    def launch_gate(self, profile: Profile) -> LaunchGate | None:
        """No gated launch: every rank allocates as soon as it starts."""
        return None


def check_options(options_model: type[BaseModel] | None, options: Mapping[str, object], engine: str) -> None:
    """`engine.options` as the engine defines it: unknown keys and bad values refused (exit 2)."""
    from pydantic import ValidationError

    from sparkctl.errors import ProfileError

    if options_model is None:
        if options:
            raise ProfileError(
                f"engine.options: engine '{engine}' takes no options ({', '.join(options)})",
                fix="remove engine.options",
            )
        return
    try:
        options_model.model_validate(dict(options))
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        known = ", ".join(options_model.model_fields)
        raise ProfileError(
            f"engine.options.{where}: {err['msg']} (engine '{engine}')",
            fix=f"engine '{engine}' takes engine.options: {known}",
        ) from None
