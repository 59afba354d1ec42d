"""A vLLM launch line (`vllm serve MODEL ...`, `python -m vllm.entrypoints.openai.api_server
--model MODEL ...`) read into the pieces of a profile (`sparkctl init --from-command`, docs/init.md).

`launcher_words(words)` says whether the line is vLLM's and how many words its launcher takes;
`read(items)` turns what follows into the fragment engines/__init__.py describes. Flags sparkctl
owns (MANAGED_FLAGS) become profile fields, never args; names are resolved as vLLM 0.32's
FlexibleArgumentParser does (`_` as `-`, its short aliases, unique prefixes of CLI_FLAGS); a name
it lacks is dropped with the nearest one as the fix. vLLM's own parser judges the values when `fit`
runs on the profile where its image is (check.py).
"""

from __future__ import annotations

import difflib
import json
import re
from typing import TYPE_CHECKING

from sparkctl.engines.command_words import arg_value
from sparkctl.engines.command_words import finding as _finding
from sparkctl.engines.vllm.cli_flags import CLI_FLAGS
from sparkctl.findings import Finding

if TYPE_CHECKING:
    from sparkctl.profile.schema import ArgValue

KIND = "vllm"
_PYTHON = re.compile(r"(.*/)?python(\d+(\.\d+)?)?")
_API_SERVER = "vllm.entrypoints.openai.api_server"
# vLLM 0.32's single-dash aliases (vllm/engine/arg_utils.py add_cli_args)
SHORT: dict[str, str] = {
    "tp": "tensor-parallel-size",
    "pp": "pipeline-parallel-size",
    "dp": "data-parallel-size",
    "dpn": "data-parallel-rank",
    "dpr": "data-parallel-start-rank",
    "dpl": "data-parallel-size-local",
    "dpa": "data-parallel-address",
    "dpp": "data-parallel-rpc-port",
    "dcp": "decode-context-parallel-size",
    "q": "quantization",
}
# flag -> the fragment field it fills (docs/init.md lists where each goes in the profile)
OWNED: dict[str, str] = {
    "model": "model",
    "revision": "revision",
    "served-model-name": "served_model_name",
    "host": "host",
    "port": "port",
    "tensor-parallel-size": "tp",
    "tp": "tp",
    "pipeline-parallel-size": "pp",
    "pp": "pp",
    "nnodes": "nnodes",
    "node-rank": "node_rank",
    "master-addr": "dist_init_addr",
    "master-port": "dist_init_port",
    "headless": "headless",
    "trust-remote-code": "trust_remote_code",
    "api-key": "api_key",
    "config": "config",
}
# What the engine does when the line says nothing, kept so clients keep working: its port, and
# the model argument as the served name (sparkctl's own defaults differ: 30000, the id's last part).
DEFAULT_PORT = 8000  # vLLM 0.32's --port default (vllm/entrypoints/openai/cli_args.py)
_INTS = {"port", "tp", "pp", "nnodes", "node_rank", "dist_init_port"}


def launcher_words(words: list[str]) -> int | None:
    """`vllm serve` (2 words), `python[3] -m vllm.entrypoints.openai.api_server` (3), else None."""
    if len(words) >= 2 and words[0].rsplit("/", 1)[-1] == "vllm" and words[1] == "serve":
        return 2
    if len(words) >= 3 and _PYTHON.fullmatch(words[0]) and words[1:3] == ["-m", _API_SERVER]:
        return 3
    return None


def resolve(flag: str) -> tuple[str | None, str | None]:
    """A flag as written -> (its full name, or None; the nearest name when unknown)."""
    if not flag.startswith("--"):
        return SHORT.get(flag.lstrip("-")), None
    name = flag[2:].replace("_", "-")
    if name in CLI_FLAGS or name in OWNED:  # `--tp`: sparkctl's guard takes it as the TP size too
        return name, None
    prefixed = sorted(f for f in CLI_FLAGS if f.startswith(name))
    if len(prefixed) == 1:
        return prefixed[0], None
    near = difflib.get_close_matches(name, sorted(CLI_FLAGS), n=1, cutoff=0.6)
    return None, near[0] if near else None


def read(items: list[tuple[str, list[str]]]) -> tuple[dict, list[Finding]]:
    """The words after the launcher -> (fragment, findings); see engines/__init__.py."""
    fields: dict[str, object] = {}
    args: dict[str, ArgValue] = {}
    out: list[Finding] = []
    for n, (flag, values) in enumerate(items):
        if not flag:
            if n == 0 and len(values) == 1 and "model" not in fields:
                fields["model"] = values[0]  # `vllm serve MODEL`
            else:
                out.append(
                    _finding(f"an extra positional argument {' '.join(values)!r}: dropped", "remove it")
                )
            continue
        name, near = resolve(flag)
        if name is None:
            fix = f"use --{near}" if near else "remove it (`vllm serve --help=all` lists the flags)"
            out.append(_finding(f"vLLM 0.32 has no flag {flag}: dropped", fix))
            continue
        if name in args or OWNED.get(name) in fields:
            out.append(
                _finding(f"{flag} is given twice: the last value counts, as in argparse", None, warn=True)
            )
        if name in OWNED:
            out += _owned(fields, OWNED[name], flag, values)
        else:
            args[name] = arg_value(values)
    out += _draft(fields, args)
    return _fragment(fields, args), out


def _owned(fields: dict[str, object], key: str, flag: str, values: list[str]) -> list[Finding]:
    if key in ("trust_remote_code", "headless"):
        fields[key] = True
        return []
    if key == "api_key":
        fields[key] = True
        return [
            _finding(
                f"{flag}: the key on the line is not written into the profile",
                "export it as SPARKCTL_API_KEY before `up` (engine.api_key: {env: SPARKCTL_API_KEY})",
                warn=True,
            )
        ]
    if key == "config":
        return [
            _finding(
                f"{flag} {' '.join(values)}: the file's settings are not read (sparkctl passes the key "
                "in a --config file of its own)",
                "put the file's flags on the line itself",
            )
        ]
    if key == "served_model_name" and len(values) > 1:
        fields[key] = values[0]
        return [_finding(f"{flag}: a profile serves one name; {values[0]!r} kept", None, warn=True)]
    if len(values) != 1:
        return [_finding(f"{flag} takes one value, got {len(values)}: dropped", f"give {flag} VALUE")]
    if key in _INTS:
        if not values[0].isdigit():
            return [_finding(f"{flag} {values[0]!r} is not a number: dropped", f"give {flag} a whole number")]
        fields[key] = int(values[0])
    else:
        fields[key] = values[0]
    return []


def _draft(fields: dict[str, object], args: dict[str, ArgValue]) -> list[Finding]:
    """--speculative-config's draft model becomes model.draft (sparkctl ships its weights); the
    rest of the JSON stays in args, which the plan merges back (flags.speculative_config)."""
    text = args.get("speculative-config")
    if not isinstance(text, str):
        return []
    try:
        config = json.loads(text)
    except ValueError:
        return [
            _finding(
                f"--speculative-config {text!r} is not JSON",
                'give it as JSON, e.g. \'{"method":"dflash","model":"ORG/NAME"}\'',
            )
        ]
    if not isinstance(config, dict) or not isinstance(config.get("model"), str):
        return []
    fields["draft"] = config.pop("model")
    if isinstance(config.get("revision"), str):
        fields["draft_revision"] = config.pop("revision")
    if config:
        args["speculative-config"] = json.dumps(config, separators=(",", ":"), sort_keys=True)
    else:
        del args["speculative-config"]
    return []


def _fragment(fields: dict[str, object], args: dict[str, ArgValue]) -> dict:
    def ref(key: str, rev: str) -> dict | None:
        return {"id": fields[key], "revision": fields.get(rev)} if key in fields else None

    fields.setdefault("port", DEFAULT_PORT)
    if "model" in fields:
        fields.setdefault("served_model_name", fields["model"])
    engine = {k: fields[k] for k in ("served_model_name", "host", "port", "trust_remote_code") if k in fields}
    layout = {
        k: fields[k]
        for k in ("tp", "pp", "nnodes", "node_rank", "dist_init_addr", "dist_init_port")
        if k in fields
    }
    if fields.get("headless") and "node_rank" not in layout:
        layout["node_rank"] = 1  # only ranks > 0 run --headless
    return {
        "kind": KIND,
        "model": ref("model", "revision"),
        "draft": ref("draft", "draft_revision"),
        "engine": engine,
        "api_keys": ["api_key"] if "api_key" in fields else [],
        "layout": layout,
        "args": args,
    }
