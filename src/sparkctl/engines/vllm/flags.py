"""vLLM's flags as sparkctl renders them: pure constants and functions (no profile import).

The command line is `vllm serve MODEL ...` (vLLM 0.32: `vllm/entrypoints/cli/serve.py`). A group
over several nodes runs one `vllm serve` per node with `--nnodes/--node-rank/--master-addr/
--master-port` (torch.distributed's TCPStore on rank 0's fabric address); ranks > 0 are
`--headless` (no API server, no host/port). No Ray.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

DEFAULT_COMMAND: tuple[str, ...] = ("vllm", "serve")

# Flags sparkctl derives from the profile; setting them in `args` would contradict the plan.
MANAGED_FLAGS: dict[str, str] = {
    "model": "model.target.id",
    "revision": "model.target.revision",
    "served-model-name": "engine.served_model_name",
    "host": "engine.host",
    "port": "engine.port",
    "tensor-parallel-size": "modes.<mode>.tp",
    "tp": "modes.<mode>.tp",
    "pipeline-parallel-size": "modes.<mode>.pp",
    "pp": "modes.<mode>.pp",
    "nnodes": "modes.<mode>.nodes",
    "node-rank": "modes.<mode>.nodes (order = rank)",
    "master-addr": "the rank-0 node's fabric.ip",
    "master-port": "fabric.dist_init_port",
    "headless": "modes.<mode>.nodes (every rank but 0)",
    "trust-remote-code": "engine.trust_remote_code",
    "api-key": "engine.api_key (a secret: env: or file:)",
    "config": "engine.api_key (sparkctl passes the key to vLLM in a --config file)",
}

KEY_FILE = "/run/secrets/sparkctl-vllm.yaml"  # vLLM reads `--config FILE` like its flags
# Where vLLM could log the key itself (its "non-default args" line at start, an argv echo): the rank
# log writer masks group 2 before any byte reaches a file.
LOG_SECRET_PATTERNS: tuple[str, ...] = (
    r"(\'api_key\': \[?)('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")",
    r"(--api-key[ =])(\S+)",
)
HOST_IP_ENV = "VLLM_HOST_IP"  # else vLLM asks the default route (8.8.8.8) and may advertise 0.0.0.0
MEM_FLAG = "gpu-memory-utilization"
DEFAULT_MEM_FRACTION = 0.92  # vllm/config/cache.py CacheConfig.gpu_memory_utilization
# GB10 (unified memory): the same cap as SGLang's static fraction (recipe.md: 0.95 hard-rebooted a
# GB10 while loading); vLLM's share covers weights + activations + KV cache like SGLang's.
GB10_MAX_MEM_FRACTION = 0.90
DFLASH = "dflash"


def speculative_config(draft_id: str, revision: str | None, user: str | None) -> str:
    """--speculative-config JSON: the profile's draft model (DFlash unless the user's JSON says
    otherwise), with the user's keys on top."""
    config: dict[str, object] = {"method": DFLASH, "model": draft_id}
    if revision:
        config["revision"] = revision
    if user:
        config.update(json.loads(user))
    return json.dumps(config, separators=(",", ":"), sort_keys=True)


def mem_fraction(argv: list[str]) -> float | None:
    flag = f"--{MEM_FLAG}"
    for i, word in enumerate(argv):
        value = None
        if word == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif word.startswith(flag + "="):
            value = word.partition("=")[2]
        if value is not None:
            try:
                return float(value)
            except ValueError:
                return None
    return None
