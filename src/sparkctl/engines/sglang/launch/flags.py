"""Validate planned SGLang flags with SGLang's own argument parser.

The parser is built by `ServerArgs.add_cli_args(argparse.ArgumentParser())` (srt/server_args.py).
`PARSER_CHECK_SOURCE` is a self-contained program that builds it, parses the flags given as its
arguments and prints one JSON object; it runs, in order of preference:

1. inside the serving image on a node (`run_in_image(argv) -> (rc, stdout, stderr)`, supplied by
   the caller): the exact SGLang of the image, nothing installed here;
2. with a local SGLang installed without its GPU stack (docs/launch-safety.md has the command),
   in a subprocess so the CLI itself never imports torch ($SPARKCTL_SGLANG_PYTHON picks the
   interpreter, default: this one);
3. else a SKIP finding saying how to enable the check.

Suggestions for unknown flags (difflib) and the findings are computed here, from the JSON.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkctl.engines.sglang.launch.gate import missing_gate_fix
from sparkctl.engines.sglang.launch.inputs import parse_version
from sparkctl.engines.sglang.launch.parser_source import PARSER_CHECK_SOURCE, REGISTRY_FLAGS
from sparkctl.findings import Finding, Severity

if TYPE_CHECKING:
    from sparkctl.engines.support.in_image import RunInImage

__all__ = ["PARSER_CHECK_SOURCE", "REGISTRY_FLAGS", "FlagCheck", "flag_findings", "parse_check_output"]
CHECK = "FlagsValid"
INSTALL_HINT = (
    "pip install torch==2.13.0 triton==3.9.0 numpy orjson psutil pybase64 requests packaging pillow "
    'starlette msgspec pydantic pyzmq tqdm ipython aiohttp && pip install --no-deps "sglang==0.5.23"'
)


@dataclass
class FlagCheck:
    """What SGLang's parser said about a set of flags."""

    method: str  # "image", "local" or "skipped"
    sglang_version: str | None = None
    errors: list[dict] = field(default_factory=list)
    deprecated: list[str] = field(default_factory=list)
    valid_flags: list[str] = field(default_factory=list)
    parser_error: str | None = None
    problem: str | None = None  # why the check could not run

    @property
    def ok(self) -> bool:
        return self.method != "skipped" and not self.errors and not self.parser_error


def parse_check_output(method: str, rc: int, stdout: str, stderr: str) -> FlagCheck:
    """Pure: the snippet's JSON (or a failure) -> FlagCheck."""
    line = next((ln for ln in reversed(stdout.strip().splitlines()) if ln.startswith("{")), "")
    try:
        data = json.loads(line) if line else None
    except json.JSONDecodeError:
        data = None
    if rc != 0 or data is None:
        tail = (stderr or stdout).strip().splitlines()[-3:]
        return FlagCheck(
            method="skipped", problem=f"parser check exited {rc}: {' | '.join(tail) or 'no output'}"
        )
    if data.get("import_error"):
        return FlagCheck(
            method="skipped",
            sglang_version=data.get("sglang_version"),
            problem=f"SGLang's parser could not be built: {data['import_error']}",
        )
    return FlagCheck(
        method=method,
        sglang_version=data.get("sglang_version"),
        errors=list(data.get("errors", [])),
        deprecated=list(data.get("deprecated", [])),
        valid_flags=list(data.get("valid_flags", [])),
        parser_error=data.get("parser_error"),
    )


def nearest_flag(flag: str, valid: list[str]) -> str | None:
    """The closest valid flag; word overlap wins ties (--mamba-scheduler-strategy ->
    --mamba-radix-cache-strategy rather than --mamba-scheduler-...)."""
    close = difflib.get_close_matches(flag, valid, n=5, cutoff=0.6)
    if not close:
        return None
    words = set(flag.strip("-").split("-"))

    def score(cand: str) -> tuple[float, float]:
        overlap = len(words & set(cand.strip("-").split("-"))) / max(len(words), 1)
        return (round(overlap, 2), difflib.SequenceMatcher(None, flag, cand).ratio())

    return max(close, key=score)


def version_mismatch(parser_version: str | None, expected: dict[str, str]) -> list[str]:
    """The declared versions (`{"the profile": "0.5.12", "the image tag": ...}`) the parser differs from."""
    got = parse_version(parser_version)
    return [
        f"{where} declares {v}"
        for where, v in expected.items()
        if got is not None and parse_version(v) not in (None, got)
    ]


def flag_findings(
    check: FlagCheck, node: str | None = None, expected: dict[str, str] | None = None
) -> list[Finding]:
    if check.method == "skipped":
        return [_skipped(check, node)]
    version = check.sglang_version or "unknown version"
    where = "in the image" if check.method == "image" else "installed locally"
    mismatch = version_mismatch(check.sglang_version, expected or {})
    about = f"SGLang {version} ({where}" + (f"; but {', '.join(mismatch)}" if mismatch else "") + ")"
    out = [
        f
        for err in check.errors
        if (f := _flag_error(check, err, about, version, mismatch, node)) is not None
    ]
    if check.parser_error and not out:
        out.append(
            Finding(
                CHECK,
                Severity.ERROR,
                f"{about} parser: {check.parser_error}",
                node=node,
                data={"sglang_version": version},
            )
        )
    for flag in check.deprecated:
        out.append(Finding(CHECK, Severity.WARN, f"{about}: {flag} is deprecated", node=node))
    if mismatch:
        out.append(_mismatch_warning(version, where, mismatch, node))
    elif not out:
        out.append(
            Finding(
                CHECK,
                Severity.OK,
                f"flags accepted by SGLang's parser: {about}",
                node=node,
                data={"sglang_version": version, "checked": True},
            )
        )
    return out


def _skipped(check: FlagCheck, node: str | None) -> Finding:
    return Finding(
        CHECK,
        Severity.WARN,
        f"flag names NOT checked with SGLang's parser ({check.problem}); value syntax only",
        fix="run where the image is reachable, or install SGLang's parser here (docs/launch-safety.md)",
        node=node,
        data={"checked": False},
    )


def _flag_error(
    check: FlagCheck, err: dict, about: str, version: str, mismatch: list[str], node: str | None
) -> Finding | None:
    """One flag the parser rejected: an unknown name, a bad value or a value outside the choices."""
    data = {"flag": err["flag"], "sglang_version": version, "mismatch": mismatch}
    if err["kind"] == "unknown":
        near = nearest_flag(err["flag"], check.valid_flags)
        gate = missing_gate_fix(err["flag"])
        return Finding(
            CHECK,
            Severity.ERROR,
            f"{about} has no flag {err['flag']}",
            fix=gate or (f"use {near}" if near else "remove it"),
            node=node,
            data={**data, "suggestion": near},
        )
    if err["kind"] == "value":
        return Finding(
            CHECK,
            Severity.ERROR,
            f"{about}: {err['flag']} {err['value']!r} is not a valid value ({err.get('error', '')})",
            fix=f"give {err['flag']} a valid value",
            node=node,
            data={**data, "value": err["value"]},
        )
    if err["kind"] == "choice":
        allowed = err.get("allowed", [])
        registry = (
            f" (not in its {err['registry']}; argparse takes any string)" if err.get("registry") else ""
        )
        return Finding(
            CHECK,
            Severity.ERROR,
            f"{about}: {err['flag']} {err['value']!r} is not allowed{registry}",
            fix=f"one of: {', '.join(allowed)}",
            node=node,
            data={**data, "value": err["value"], "allowed": allowed},
        )
    return None


def _mismatch_warning(version: str, where: str, mismatch: list[str], node: str | None) -> Finding:
    return Finding(
        CHECK,
        Severity.WARN,
        f"flags checked with SGLang {version}'s parser ({where}), but "
        f"{', '.join(mismatch)}: a flag only that version knows (or lacks) is not caught",
        fix="install the declared SGLang locally, run where the image is reachable, or fix "
        "engine.options.version",
        node=node,
        data={"sglang_version": version, "mismatch": mismatch},
    )


def local_python() -> str | None:
    """The interpreter that has SGLang: $SPARKCTL_SGLANG_PYTHON, or this one if sglang is importable."""
    env = os.environ.get("SPARKCTL_SGLANG_PYTHON")
    if env:
        return env
    return sys.executable if importlib.util.find_spec("sglang") is not None else None


def _local_cache_key(python: str, flags: list[str]) -> str | None:
    """The local parser's answer depends on the interpreter, its installed SGLang and the flags:
    a key over those (None when the SGLang install cannot be identified without importing it)."""
    import hashlib
    import importlib.metadata as md

    if os.path.realpath(python) != os.path.realpath(sys.executable):
        return None
    try:
        dist = md.distribution("sglang")
        files = dist.files or []
        record = next((f for f in files if str(f).endswith(".dist-info/RECORD")), None)
        stamp = os.stat(dist.locate_file(record)).st_mtime_ns if record else 0
    except (md.PackageNotFoundError, OSError):
        return None
    material = json.dumps([os.path.realpath(python), dist.version, stamp, PARSER_CHECK_SOURCE, flags])
    return hashlib.sha256(material.encode()).hexdigest()


def _cache_path(key: str) -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "sparkctl", "flag-parser", f"{key}.json")


def check_flags_local(flags: list[str], python: str | None = None, timeout: float = 120.0) -> FlagCheck:
    """The local SGLang's parser in a subprocess (it imports torch: seconds); an answer for the
    same interpreter, SGLang install and flags is reused from ~/.cache/sparkctl/flag-parser."""
    python = python or local_python()
    if python is None:
        return FlagCheck(method="skipped", problem="SGLang is not installed here")
    key = _local_cache_key(python, flags)
    if key is not None:
        try:
            with open(_cache_path(key)) as fh:
                return parse_check_output("local", 0, fh.read(), "")
        except OSError:
            pass
    try:
        proc = subprocess.run(
            [python, "-c", PARSER_CHECK_SOURCE, *flags],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return FlagCheck(method="skipped", problem=f"{python}: {exc}")
    result = parse_check_output("local", proc.returncode, proc.stdout, proc.stderr)
    if key is not None and result.method == "local":
        import contextlib

        with contextlib.suppress(OSError):
            path = _cache_path(key)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as fh:
                fh.write(proc.stdout)
            os.replace(tmp, path)
    return result


def check_flags(
    flags: list[str],
    run_in_image: RunInImage | None = None,
    *,
    python: str = "python3",
    progress: Callable[[str], None] | None = None,
) -> FlagCheck:
    """The image's parser if the caller can run it, else a local SGLang, else skipped (the
    problem names every way that was tried and why it failed)."""
    say = progress or (lambda _msg: None)
    image_problem = None
    if run_in_image is not None:
        try:
            rc, out, err = run_in_image([python, "-c", PARSER_CHECK_SOURCE, *flags])
            result = parse_check_output("image", rc, out, err)
        except Exception as exc:  # noqa: BLE001 - any transport failure means: try the next way
            why = getattr(exc, "message", None) or str(exc) or type(exc).__name__  # never its fix
            result = FlagCheck(method="skipped", problem=" ".join(why.split()))
        if result.method != "skipped":
            return result
        image_problem = f"in the image: {result.problem}"
        say(f"SGLang parser in the image failed ({result.problem}); trying a local SGLang")
    local = check_flags_local(flags)
    if local.method == "skipped" and image_problem:
        local.problem = f"{image_problem}; locally: {local.problem}"
    return local
