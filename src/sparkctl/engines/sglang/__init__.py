"""SGLang as a sparkctl engine: argv/env rendering here, launch safety in launch/ (its own parser,
rules and memory planner)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkctl.engines.base import (
    LaunchGate,
    LaunchTarget,
    RankLayout,
    Readiness,
    fabric_host_env,
    launcher,
    render_args,
)
from sparkctl.engines.capabilities import (
    Auth,
    Capabilities,
    ImageMarkers,
    LayoutFlags,
    MemoryModel,
    MetricNames,
    MultiNode,
)
from sparkctl.engines.sglang import flags as F
from sparkctl.engines.sglang.cli_flags import CLI_FLAGS
from sparkctl.profile.derived import served_model_name

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sparkctl.connectors.pool import NodePool
    from sparkctl.engines.support.launch_check import LaunchCheck, LaunchRequest, Serving
    from sparkctl.facts.gpu import GpuReport
    from sparkctl.findings import Finding
    from sparkctl.profile.schema import ArgValue, Mode, Node, Profile


# SGLang 0.5.23's names (sglang/srt/observability/metrics_collector.py; docs/top.md); the drain's
# gauge counts a request from arrival to the last byte of its response (pure-ASGI middleware).
METRICS = MetricNames(
    running="sglang:num_running_reqs",
    queued="sglang:num_queue_reqs",
    token_usage="sglang:token_usage",
    gen_throughput="sglang:gen_throughput",
    accept_length="sglang:spec_accept_length",
    accept_rate="sglang:spec_accept_rate",
    cache_hit_rate="sglang:cache_hit_rate",
    max_tokens="sglang:max_total_num_tokens",
    prompt_tokens="sglang:prompt_tokens_total",
    generation_tokens="sglang:generation_tokens_total",
    requests="sglang:num_requests_total",
    aborted="sglang:num_aborted_requests_total",
    ttft="sglang:time_to_first_token_seconds",
    itl="sglang:inter_token_latency_seconds",
    e2e="sglang:e2e_request_latency_seconds",
    in_flight=("sglang:http_requests_active",),
    enable_flag="enable-metrics",
)


LAYOUT = LayoutFlags(nnodes="--nnodes", node_rank="--node-rank", dist_init_addr="--dist-init-addr")


def _is_gb10(node: Node) -> bool:
    return node.gpu is not None and node.gpu.compute_capability == "12.1" and node.gpu.unified_memory


def auth_flags(profile: Profile) -> list[str]:
    """SGLang 0.5.23 takes the keys only as --api-key/--admin-api-key or from a --config YAML file:
    the file keeps them off every process list."""
    if profile.engine.api_key is None and profile.engine.admin_api_key is None:
        return []
    return ["--config", F.KEY_FILE]


def _serving_at(
    profile: Profile, argv: list[str], node: str, fraction: float, available: int
) -> Serving | None:
    from sparkctl.engines.sglang.launch.pipeline import serving_at

    return serving_at(profile, argv, node, fraction, available)


class _Launch:
    """SGLang's launch safety (launch/): its parser in the image, version/GPU rules, memory planner."""

    def check_names(self) -> frozenset[str]:
        from sparkctl.engines.sglang.launch import CHECK_NAMES

        return CHECK_NAMES

    def check(
        self,
        plan: LaunchTarget,
        profile: Profile,
        pool: NodePool | None = None,
        gpu_reports: Mapping[str, GpuReport | None] | None = None,
    ) -> list[Finding]:
        from sparkctl.engines.sglang.launch.pipeline import preflight_findings  # the one launch pipeline

        return preflight_findings(plan, profile, pool, dict(gpu_reports or {}))

    def launch_check(self, plan: LaunchTarget, profile: Profile, request: LaunchRequest) -> LaunchCheck:
        from sparkctl.engines.sglang.launch.pipeline import launch_check

        return launch_check(plan, profile, request)


class SGLang(Capabilities):
    name = "sglang"
    default_command = F.DEFAULT_COMMAND
    managed_flags = F.MANAGED_FLAGS
    cli_flags = CLI_FLAGS
    # SGLang 0.5.23 answers every setting, api_key and admin_api_key included, to any API-key holder
    # (srt/entrypoints/http_server.py: server_info, its deprecated alias get_server_info).
    private_routes = ("/server_info", "/get_server_info")
    # sglang-router takes a worker's model id from served_model_name here (docs/topology.md)
    private_route_fields = ("served_model_name", "model_path", "tokenizer_path")
    default_user = "root"  # not measured as non-root here (no GPU, no SGLang image): docs/security.md
    readiness = Readiness()
    # Capabilities (engines/capabilities.py): SGLang has every one.
    auth = Auth(("api-key", "admin-api-key"), F.KEY_FILE, "yaml", F.LOG_SECRET_PATTERNS)
    memory = MemoryModel(
        flag="mem-fraction-static",
        gb10_max=F.GB10_MAX_MEM_FRACTION,
        fraction=F.mem_fraction,
        request_cap_flag="max-running-requests",
        serving=_serving_at,
    )
    metrics = METRICS
    layout_flags = LAYOUT
    multi_node = MultiNode(host_ip_env=F.HOST_IP_ENV)
    images = ImageMarkers(("sglang",), version_key="version")
    options = F.Options
    launch = _Launch()
    nccl_library_env = "SGLANG_NCCL_SO_PATH"

    def serving_args(self, profile: Profile, mode: Mode) -> dict[str, ArgValue]:
        defaults = profile.engine.recipe_defaults
        args: dict[str, ArgValue] = dict(F.RECIPE_DEFAULT_ARGS) if defaults else {}
        if profile.engine.trust_remote_code:
            args["trust-remote-code"] = True
        args.update(profile.engine.args)
        args.update(mode.args)
        if defaults and all(_is_gb10(profile.node(n)) for n in mode.nodes):
            args.setdefault("mem-fraction-static", F.GB10_MAX_MEM_FRACTION)
        if profile.model.draft is not None:
            args.setdefault("speculative-algorithm", F.DFLASH)
        return args

    def model_flags(self, profile: Profile) -> list[str]:
        model = profile.model
        flags = ["--model-path", model.target.id]
        if model.target.revision:
            flags += ["--revision", model.target.revision]
        flags += ["--served-model-name", served_model_name(profile)]
        if model.draft is not None:
            flags += ["--speculative-draft-model-path", model.draft.id]
            if model.draft.revision:
                flags += ["--speculative-draft-model-revision", model.draft.revision]
        return flags

    def rank_argv(self, profile: Profile, args: dict[str, ArgValue], layout: RankLayout) -> list[str]:
        # Keys go in SGLang's --config file (auth_flags): never on a process list.
        argv = (
            launcher(profile, self.default_command)
            + self.model_flags(profile)
            + render_args(args)
            + auth_flags(profile)
        )
        argv += ["--tp", str(layout.tp)]
        if layout.pp > 1:
            argv += ["--pp-size", str(layout.pp)]
        if layout.nnodes > 1:
            flags = LAYOUT
            argv += [flags.nnodes, str(layout.nnodes), flags.node_rank, str(layout.rank)]
            argv += [flags.dist_init_addr, layout.dist_init_addr or ""]
        if layout.gate_port is not None:
            argv += [F.GATE.flag, str(layout.gate_port)]
        return argv + ["--host", layout.host, "--port", str(layout.port)]

    def rank_env(self, profile: Profile, node: Node, layout: RankLayout) -> dict[str, str]:
        return fabric_host_env(self.multi_node, node, layout)

    def launch_gate(self, profile: Profile) -> LaunchGate | None:
        return F.launch_gate(F.release(profile))


ENGINE = SGLang()
