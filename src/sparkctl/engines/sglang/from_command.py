"""An SGLang launch line (`python -m sglang.launch_server ...`, `sglang serve ...`) read into the
pieces of a profile (`sparkctl init --from-command`, docs/init.md).

`launcher_words(words)` says whether the line is SGLang's and how many words its launcher takes;
`read(items)` turns the flags after it ((flag, values) items, discover/launch_line.py) into the
fragment engines/__init__.py describes. Flags sparkctl owns (MANAGED_FLAGS) become profile fields,
never args; names are resolved as SGLang 0.5.23's argparse does (CLI_FLAGS, unique prefixes);
a name it lacks is dropped with the nearest one as the fix. Values are judged by SGLang's own
parser when `fit` runs on the profile (launch/flags.py).
"""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING

from sparkctl.engines.command_words import arg_value
from sparkctl.engines.command_words import finding as _finding
from sparkctl.engines.sglang.cli_flags import CLI_FLAGS
from sparkctl.findings import Finding

if TYPE_CHECKING:
    from sparkctl.profile.schema import ArgValue

KIND = "sglang"
_PYTHON = re.compile(r"(.*/)?python(\d+(\.\d+)?)?")
# flag -> the fragment field it fills (docs/init.md lists where each goes in the profile)
OWNED: dict[str, str] = {
    "model-path": "model",
    "model": "model",
    "revision": "revision",
    "speculative-draft-model-path": "draft",
    "speculative-draft-model": "draft",
    "speculative-draft-model-revision": "draft_revision",
    "served-model-name": "served_model_name",
    "host": "host",
    "port": "port",
    "tp": "tp",
    "tp-size": "tp",
    "tensor-parallel-size": "tp",
    "pp-size": "pp",
    "pipeline-parallel-size": "pp",
    "nnodes": "nnodes",
    "node-rank": "node_rank",
    "dist-init-addr": "dist_init",
    "nccl-init-addr": "dist_init",
    "trust-remote-code": "trust_remote_code",
    "api-key": "api_key",
    "admin-api-key": "admin_api_key",
    "config": "config",
    "gated-launch-port": "gated_start",
}
# What the engine does when the line says nothing, kept so clients keep working: its port, and
# the model argument as the served name (sparkctl's own defaults differ: 30000, the id's last part).
DEFAULT_PORT = 30000  # SGLang 0.5.23's --port default (srt/server_args.py)
_INTS = {"port", "tp", "pp", "nnodes", "node_rank"}


def launcher_words(words: list[str]) -> int | None:
    """`python[3] -m sglang.launch_server` (3 words), `sglang serve` (2), else None."""
    if len(words) >= 3 and _PYTHON.fullmatch(words[0]) and words[1:3] == ["-m", "sglang.launch_server"]:
        return 3
    if len(words) >= 2 and words[0].rsplit("/", 1)[-1] == "sglang" and words[1] == "serve":
        return 2
    return None


def resolve(flag: str) -> tuple[str | None, str | None]:
    """A flag as written -> (its full name, or None; the nearest name when unknown)."""
    name = flag.lstrip("-")
    if not flag.startswith("--"):
        return None, None
    if name in CLI_FLAGS:
        return name, None
    prefixed = sorted(f for f in CLI_FLAGS if f.startswith(name))
    if len(prefixed) == 1:  # argparse takes a unique prefix (allow_abbrev)
        return prefixed[0], None
    near = difflib.get_close_matches(name, sorted(CLI_FLAGS), n=1, cutoff=0.6)
    return None, near[0] if near else None


def read(items: list[tuple[str, list[str]]]) -> tuple[dict, list[Finding]]:
    """The flags after the launcher -> (fragment, findings); see engines/__init__.py."""
    fields: dict[str, object] = {}
    args: dict[str, ArgValue] = {}
    out: list[Finding] = []
    for flag, values in items:
        if not flag:
            out.append(
                _finding(f"SGLang takes no positional argument: {' '.join(values)!r} dropped", "remove it")
            )
            continue
        name, near = resolve(flag)
        if name is None:
            fix = (
                f"use --{near}"
                if near
                else "remove it (`python -m sglang.launch_server --help` lists the flags)"
            )
            out.append(_finding(f"SGLang 0.5.23 has no flag {flag}: dropped", fix))
            continue
        if name in args or OWNED.get(name) in fields:
            out.append(
                _finding(f"{flag} is given twice: the last value counts, as in argparse", None, warn=True)
            )
        if name in OWNED:
            out += _owned(fields, OWNED[name], flag, values)
        else:
            args[name] = arg_value(values)
    return _fragment(fields, args), out


def _owned(fields: dict[str, object], key: str, flag: str, values: list[str]) -> list[Finding]:
    if key == "trust_remote_code":
        fields[key] = True
        return []
    if key in ("api_key", "admin_api_key"):
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
                f"{flag} {' '.join(values)}: the file's settings are not read (sparkctl passes its "
                "keys in a --config file of its own)",
                "put the file's flags on the line itself",
            )
        ]
    if key == "gated_start":
        return [
            _finding(
                f"{flag}: the gate is sparkctl's (it opens it once every node of the group is admitted); "
                "the port on the line is not kept",
                "set memory.gated_start: true in the profile",
                warn=True,
            )
        ]
    if len(values) != 1:
        return [_finding(f"{flag} takes one value, got {len(values)}: dropped", f"give {flag} VALUE")]
    value = values[0]
    if key in _INTS:
        if not value.isdigit():
            return [_finding(f"{flag} {value!r} is not a number: dropped", f"give {flag} a whole number")]
        fields[key] = int(value)
    elif key == "dist_init":
        host, _, port = value.rpartition(":")
        fields["dist_init_addr"] = host or value
        if port.isdigit():
            fields["dist_init_port"] = int(port)
    else:
        fields[key] = value
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
    return {
        "kind": KIND,
        "model": ref("model", "revision"),
        "draft": ref("draft", "draft_revision"),
        "engine": engine,
        "api_keys": [k for k in ("api_key", "admin_api_key") if k in fields],
        "layout": layout,
        "args": args,
    }
