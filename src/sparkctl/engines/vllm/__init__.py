"""vLLM as a sparkctl engine: argv/env rendering, readiness, metric names; launch safety in check.py.

Measured on vLLM 0.32 (docs/engines.md): `/health` only says the API server reaches its engine core
(it never asks the workers, and answers 200 while a TP peer is dead), so readiness is `/v1/models`
then `/health`, and a dead or hung rank is the supervisor's to find (containers, not HTTP).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkctl.engines.base import LaunchTarget, RankLayout, Readiness, fabric_host_env, launcher, render_args
from sparkctl.engines.capabilities import (
    Auth,
    Capabilities,
    ImageMarkers,
    LayoutFlags,
    MemoryModel,
    MetricNames,
    MultiNode,
)
from sparkctl.engines.vllm import flags as F
from sparkctl.engines.vllm.cli_flags import CLI_FLAGS
from sparkctl.profile.derived import served_model_name

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sparkctl.connectors.pool import NodePool
    from sparkctl.engines.support.launch_check import LaunchCheck, LaunchRequest
    from sparkctl.facts.gpu import GpuReport
    from sparkctl.findings import Finding
    from sparkctl.profile.schema import ArgValue, Mode, Node, Profile

# vLLM 0.32's names (vllm/v1/metrics/loggers.py); /metrics is always on. The drain counts what the
# engine holds (running + waiting): a request leaves them when its last token is produced.
METRICS = MetricNames(
    running="vllm:num_requests_running",
    queued="vllm:num_requests_waiting",
    token_usage="vllm:kv_cache_usage_perc",
    prompt_tokens="vllm:prompt_tokens_total",
    generation_tokens="vllm:generation_tokens_total",
    requests="vllm:request_success_total",
    ttft="vllm:time_to_first_token_seconds",
    itl="vllm:inter_token_latency_seconds",
    e2e="vllm:e2e_request_latency_seconds",
    in_flight=("vllm:num_requests_running", "vllm:num_requests_waiting"),
)


LAYOUT = LayoutFlags(
    nnodes="--nnodes", node_rank="--node-rank", dist_init_addr="--master-addr", dist_init_port="--master-port"
)


def _is_gb10(node: Node) -> bool:
    return node.gpu is not None and node.gpu.compute_capability == "12.1" and node.gpu.unified_memory


class _Launch:
    """vLLM's launch safety (check.py): its own parser in the image, arch rules, memory."""

    def check_names(self) -> frozenset[str]:
        from sparkctl.engines.vllm.check import CHECK_NAMES

        return CHECK_NAMES

    def check(
        self,
        plan: LaunchTarget,
        profile: Profile,
        pool: NodePool | None = None,
        gpu_reports: Mapping[str, GpuReport | None] | None = None,
    ) -> list[Finding]:
        from sparkctl.engines.vllm.check import launch_findings

        return launch_findings(plan, profile, pool, dict(gpu_reports or {}))

    def launch_check(self, plan: LaunchTarget, profile: Profile, request: LaunchRequest) -> LaunchCheck:
        from sparkctl.engines.vllm.check import launch_check

        return launch_check(plan, profile, request)


class VLlm(Capabilities):
    name = "vllm"
    default_command = F.DEFAULT_COMMAND
    managed_flags = F.MANAGED_FLAGS
    cli_flags = CLI_FLAGS
    # /health answers as soon as the API server reaches EngineCore (no generation): a short wait.
    readiness = Readiness(health_timeout=5.0)
    # vLLM serves /server_info only with VLLM_SERVER_DEV_MODE=1, outside its key check (which covers
    # /v1 only): the whole config and every VLLM_* variable.
    private_routes = ("/server_info",)
    private_route_fields = ()  # its settings route is a dev-mode one: refused
    default_user = "node"  # serves as the node user's uid:gid (measured on the CPU build: docs/security.md)
    # Capabilities (engines/capabilities.py). vLLM's --config YAML keeps the key off argv; it has
    # no admin key. Its memory check judges --gpu-memory-utilization; it plans no request count.
    auth = Auth(("api-key",), F.KEY_FILE, "yaml", F.LOG_SECRET_PATTERNS)
    memory = MemoryModel(
        flag=F.MEM_FLAG,
        gb10_max=F.GB10_MAX_MEM_FRACTION,
        fraction=F.mem_fraction,
        request_cap_flag="max-num-seqs",
    )
    metrics = METRICS
    layout_flags = LAYOUT
    multi_node = MultiNode(host_ip_env=F.HOST_IP_ENV)
    # Its checks run its own parser in the image: no release to pick rules by.
    images = ImageMarkers(("vllm",))
    launch = _Launch()
    nccl_library_env = "VLLM_NCCL_SO_PATH"

    def serving_args(self, profile: Profile, mode: Mode) -> dict[str, ArgValue]:
        args: dict[str, ArgValue] = {}
        if profile.engine.trust_remote_code:
            args["trust-remote-code"] = True
        args.update(profile.engine.args)
        args.update(mode.args)
        if profile.engine.recipe_defaults and all(_is_gb10(profile.node(n)) for n in mode.nodes):
            args.setdefault(F.MEM_FLAG, F.GB10_MAX_MEM_FRACTION)
        draft = profile.model.draft
        if draft is not None:
            user = args.get("speculative-config")
            args["speculative-config"] = F.speculative_config(
                draft.id, draft.revision, str(user) if user else None
            )
        return args

    def rank_argv(self, profile: Profile, args: dict[str, ArgValue], layout: RankLayout) -> list[str]:
        model = profile.model.target
        argv = [*launcher(profile, self.default_command), model.id]
        if model.revision:
            argv += ["--revision", model.revision]
        argv += ["--served-model-name", served_model_name(profile), *render_args(args)]
        if profile.engine.api_key is not None:
            argv += ["--config", F.KEY_FILE]  # the key in a YAML file: never on a process list
        argv += ["--tensor-parallel-size", str(layout.tp)]
        if layout.pp > 1:
            argv += ["--pipeline-parallel-size", str(layout.pp)]
        if layout.nnodes > 1:
            addr, _, port = (layout.dist_init_addr or "").rpartition(":")
            flags = LAYOUT
            argv += [flags.nnodes, str(layout.nnodes), flags.node_rank, str(layout.rank)]
            argv += [flags.dist_init_addr, addr, "--master-port", port]
            if layout.rank > 0:
                return [*argv, "--headless"]  # no API server on the other ranks
        return [*argv, "--host", layout.host, "--port", str(layout.port)]

    def rank_env(self, profile: Profile, node: Node, layout: RankLayout) -> dict[str, str]:
        return fabric_host_env(self.multi_node, node, layout)


ENGINE = VLlm()
