"""SGLang's flags as sparkctl renders them (pure constants and functions) and its `engine.options`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from sparkctl.engines.sglang.launch.gate import GATE, launch_gate  # noqa: F401 - the gate, kept with the launch rules
from sparkctl.engines.sglang.launch.inputs import GB10_MAX_MEM_FRACTION  # noqa: F401 - the one cap, kept with the launch rules
from sparkctl.profile.base import Strict

if TYPE_CHECKING:
    from sparkctl.profile.schema import ArgValue, Profile

DEFAULT_COMMAND: tuple[str, ...] = ("python3", "-m", "sglang.launch_server")
# SGLang's --config YAML: the API keys stay off argv (planning/hardening.py writes it from the secrets)
KEY_FILE = "/run/secrets/sparkctl-sglang.yaml"

# Flags sparkctl derives from the profile; setting them in `args` would contradict the plan.
MANAGED_FLAGS: dict[str, str] = {
    "model-path": "model.target.id",
    "revision": "model.target.revision",
    "served-model-name": "engine.served_model_name",
    "host": "engine.host",
    "port": "engine.port",
    "tp": "modes.<mode>.tp",
    "tp-size": "modes.<mode>.tp",
    "tensor-parallel-size": "modes.<mode>.tp",
    "pp-size": "modes.<mode>.pp",
    "pipeline-parallel-size": "modes.<mode>.pp",
    "nnodes": "modes.<mode>.nodes",
    "node-rank": "modes.<mode>.nodes (order = rank)",
    "dist-init-addr": "fabric.dist_init_port and the rank-0 node's fabric.ip",
    "nccl-init-addr": "fabric.dist_init_port and the rank-0 node's fabric.ip",
    "speculative-draft-model-path": "model.draft.id",
    "speculative-draft-model-revision": "model.draft.revision",
    "trust-remote-code": "engine.trust_remote_code",
    "api-key": "engine.api_key (a secret: env: or file:)",
    "admin-api-key": "engine.admin_api_key (a secret: env: or file:)",
    "config": "engine.api_key (sparkctl passes the keys to SGLang in a --config file)",
    "gated-launch-port": "memory.gated_start (sparkctl opens the gate after admission)",
}

# The reference recipe's serving defaults (recipe.md): each one fixes a measured problem.
# --trust-remote-code is not one of them: remote code is opt-in (engine.trust_remote_code).
RECIPE_DEFAULT_ARGS: dict[str, ArgValue] = {
    "stream-interval": 1,  # one token per SSE event: chunk-counting clients otherwise report ~4x low
    "sleep-on-idle": True,  # idle scheduler busy-spins ~97 % of a core without it
}
DFLASH = "DFLASH"
HOST_IP_ENV = "SGLANG_HOST_IP"  # else SGLang may advertise its LAN/Wi-Fi address and hang at init
# SGLang logs every server setting at INFO on start (`server_args=ServerArgs(... api_key='K',
# admin_api_key='A' ...)`, srt/entrypoints/engine.py): the values after these names are masked in
# the rank log on the node, whatever their length (group 1 kept, group 2 replaced).
LOG_SECRET_PATTERNS: tuple[str, ...] = (
    r"\b((?:admin_)?api_key=)('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")",
    r"(--(?:admin-)?api-key[ =])(\S+)",
)


class Options(Strict):
    """`engine.options` of `kind: sglang` (checked when the plan is built)."""

    version: str | None = Field(
        None,
        description="SGLang release in the image (e.g. 0.5.23), for rule selection; `init` fills it from "
        "the image's label. engine.sglang_version, its older spelling, still loads.",
    )


def release(profile: Profile) -> str | None:
    """The SGLang release the profile declares (engine.options.version), None when unset."""
    return Options.model_validate(dict(profile.engine.options)).version


def mem_fraction(argv: list[str]) -> float | None:
    for i, word in enumerate(argv[:-1]):
        if word == "--mem-fraction-static":
            try:
                return float(argv[i + 1])
            except ValueError:
                return None
    return None
