"""llama.cpp's `llama-server` as a sparkctl engine: one process on one node, OpenAI-compatible.

The core (argv, env, readiness) and the capabilities it has: auth (its key alone in the file
`--api-key-file` reads), metrics (`--metrics`), image markers, options (the GGUF file), launch
checks (flag names against llama-server's `--help`: check.py). It lacks a memory model (no fixed
fraction: it allocates what the model and context take), layout flags and multi-node (solo only:
planning refuses a replica over several nodes) and an NCCL library variable. docs/engines.md
"llama.cpp".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkctl.engines.base import RankLayout, Readiness, launcher, render_args
from sparkctl.engines.capabilities import Auth, Capabilities, ImageMarkers, MetricNames
from sparkctl.engines.llamacpp import flags as F
from sparkctl.errors import ProfileError
from sparkctl.profile.derived import served_model_name

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sparkctl.connectors.pool import NodePool
    from sparkctl.engines.base import LaunchTarget
    from sparkctl.engines.support.launch_check import LaunchCheck, LaunchRequest
    from sparkctl.facts.gpu import GpuReport
    from sparkctl.findings import Finding
    from sparkctl.profile.schema import ArgValue, Mode, Node, Profile

# tools/server/server.cpp's names (prefix llamacpp:, only with --metrics). No histograms, no KV
# gauge in current builds; the drain sums the slots generating and the requests waiting for one.
METRICS = MetricNames(
    running="llamacpp:requests_processing",
    queued="llamacpp:requests_deferred",
    gen_throughput="llamacpp:predicted_tokens_seconds",
    prompt_tokens="llamacpp:prompt_tokens_total",
    generation_tokens="llamacpp:tokens_predicted_total",
    in_flight=("llamacpp:requests_processing", "llamacpp:requests_deferred"),
    enable_flag="metrics",
)


class _Launch:
    """llama.cpp's launch safety (check.py): the flag names, against the image's llama-server."""

    def check_names(self) -> frozenset[str]:
        from sparkctl.engines.llamacpp.check import CHECK_NAMES

        return CHECK_NAMES

    def check(
        self,
        plan: LaunchTarget,
        profile: Profile,
        pool: NodePool | None = None,
        gpu_reports: Mapping[str, GpuReport | None] | None = None,
    ) -> list[Finding]:
        from sparkctl.engines.llamacpp.check import flag_findings

        return flag_findings(plan, profile, pool)

    def launch_check(self, plan: LaunchTarget, profile: Profile, request: LaunchRequest) -> LaunchCheck:
        from sparkctl.engines.llamacpp.check import launch_check

        return launch_check(plan, profile, request)


class LlamaCpp(Capabilities):
    name = "llamacpp"
    default_command = F.DEFAULT_COMMAND
    managed_flags = F.MANAGED_FLAGS
    cli_flags: frozenset[str] = frozenset()  # its parser takes no abbreviations
    default_user = "root"
    # /health answers 200 once the model is loaded (503 before); it runs no generation.
    readiness = Readiness(health_timeout=5.0)
    private_routes: tuple[str, ...] = ()  # /slots (every prompt) is rendered off: --no-slots
    private_route_fields: tuple[str, ...] = ()
    auth = Auth(("api-key",), F.KEY_FILE, "plain", F.LOG_SECRET_PATTERNS)
    metrics = METRICS
    images = ImageMarkers(("llama.cpp", "llama-server"))
    options = F.Options
    launch = _Launch()

    def serving_args(self, profile: Profile, mode: Mode) -> dict[str, ArgValue]:
        if profile.model.draft is not None:
            raise ProfileError(
                "model.draft: sparkctl plans no draft model for llama.cpp",
                fix="remove model.draft (or serve it with engine.kind: sglang or vllm)",
            )
        args: dict[str, ArgValue] = dict(F.RECIPE_DEFAULT_ARGS) if profile.engine.recipe_defaults else {}
        args.update(profile.engine.args)
        args.update(mode.args)
        if F.SLOTS not in args:
            args.setdefault(F.NO_SLOTS, True)  # /slots hands every request's prompt to any key holder
        return args

    def model_file(self, profile: Profile, hf_home: str) -> str:
        """The GGUF file a rank opens: the pinned snapshot's `engine.options.gguf_file`."""
        target = profile.model.target
        revision = target.revision or ""
        if not F.COMMIT_RE.match(revision):
            raise ProfileError(
                f"model.target.revision: llama-server opens {target.id}'s GGUF file by path, which "
                f"needs the snapshot's commit, not {revision or 'none'!r}",
                fix="pin model.target.revision to the 40-hex commit (`sparkctl ship` and the HF cache's "
                "refs/ say which)",
            )
        options = F.Options.model_validate(dict(profile.engine.options))
        return F.model_path(hf_home, target.id, revision, options.gguf_file)

    def rank_argv(self, profile: Profile, args: dict[str, ArgValue], layout: RankLayout) -> list[str]:
        argv = [*launcher(profile, self.default_command), "--model", self.model_file(profile, layout.hf_home)]
        argv += ["--alias", served_model_name(profile), *render_args(args)]
        if profile.engine.api_key is not None:
            argv += ["--api-key-file", F.KEY_FILE]  # the key in a file: never on a process list
        return [*argv, "--host", layout.host, "--port", str(layout.port)]

    def rank_env(self, profile: Profile, node: Node, layout: RankLayout) -> dict[str, str]:
        return {}  # one node: no address to advertise


ENGINE = LlamaCpp()
