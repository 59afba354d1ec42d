"""llama.cpp's `llama-server` as sparkctl renders it: pure constants, its options, the model's path.

A rank runs `/app/llama-server --model FILE --alias NAME [args] [--api-key-file FILE] --host H
--port P`: one process, one node, its GGUF file opened by path from the shipped HF snapshot (llama.cpp does
not read the HF cache by repo id offline). Its parser takes no abbreviations and its own flags
(`-m`, `-c`, `-ngl`) are not argparse's: a profile's `args` key renders `--key` as for the others.
"""

from __future__ import annotations

import posixpath
import re

from pydantic import Field, field_validator

from sparkctl.profile.base import Strict

# Where llama.cpp's own server images have it (.devops/*.Dockerfile: `ENTRYPOINT ["/app/llama-server"]`,
# /app not on PATH): the rank's argv runs in place of that entrypoint. Another image: engine.command.
DEFAULT_COMMAND: tuple[str, ...] = ("/app/llama-server",)

# Flags sparkctl derives from the profile; setting them in `args` would contradict the plan.
MANAGED_FLAGS: dict[str, str] = {
    "model": "model.target and engine.options.gguf_file",
    "alias": "engine.served_model_name",
    "host": "engine.host",
    "port": "engine.port",
    "api-key": "engine.api_key (a secret: env: or file:)",
    "api-key-file": "engine.api_key (sparkctl passes the key to llama-server in a file)",
    # Fetching by repo or URL would bypass the shipped snapshot (engine.offline).
    "hf-repo": "model.target.id",
    "hf-file": "engine.options.gguf_file",
    "model-url": "model.target.id",
    "rpc": "modes.<mode>.nodes (sparkctl serves llama.cpp on one node)",
}

# `--api-key-file`: one key a line (tools/server: every non-empty line is a key); sparkctl writes
# the key alone. The key never reaches argv, env or `docker inspect`.
KEY_FILE = "/run/secrets/sparkctl-llamacpp.key"
# Where llama-server could log a key itself, masked on the node: an argv echo of `--api-key`, and
# the key's last 4 characters its HTTP setup logs at trace level (tools/server/server-http.cpp).
LOG_SECRET_PATTERNS: tuple[str, ...] = (r"(--api-key[ =])(\S+)", r"(api_keys: \*\*\*\*)(\S+)")

# Serving defaults of `engine.recipe_defaults`: every layer on the GPU (a CPU build ignores it),
# and no /slots route (it answers every slot's prompt to any key holder).
RECIPE_DEFAULT_ARGS: dict[str, int | bool] = {"n-gpu-layers": 999}
NO_SLOTS = "no-slots"
SLOTS = "slots"

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")


class Options(Strict):
    """`engine.options` of `kind: llamacpp` (checked when the plan is built)."""

    gguf_file: str = Field(
        description="The GGUF file in the model's snapshot, e.g. qwen3-0.6b-q8_0.gguf (of a split "
        "model the first part, *-00001-of-0000N.gguf)."
    )

    @field_validator("gguf_file")
    @classmethod
    def _relative_gguf(cls, v: str) -> str:
        parts = v.split("/")
        if v.startswith("/") or ".." in parts or "" in parts or not v.endswith(".gguf"):
            raise ValueError("a .gguf path inside the model's snapshot (relative, no '..')")
        return v


def hub_dir(model_id: str) -> str:
    """huggingface_hub's cache folder of a repo: `models--org--name`."""
    return "models--" + model_id.replace("/", "--")


def model_path(hf_home: str, model_id: str, commit: str, gguf_file: str) -> str:
    """The GGUF file in the container: the shipped snapshot under the mounted hub cache."""
    return posixpath.join(hf_home, "hub", hub_dir(model_id), "snapshots", commit, gguf_file)
