"""A probe: a constant argv run through a node's connector, and the pure parser of its output.

Use one alone (`probe.run(conn)`), or many at once with `run_batch`, which runs them concurrently
ON the node in one SSH exec (an exec costs an sshd session; a preflight needs ~10 probes per
node). Preflight, `init` and `up` all read facts through these; the parsers live beside their
probes in the other modules of this package (net, rdma, gpu, disk, docker, hfcache).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkctl.connectors.base import RunResult
from sparkctl.errors import SparkctlError

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector


class ParseError(ValueError):
    """The text is not what the probe's command prints."""


PROBE_TIMEOUT = 20.0

# Runs on the node: reads [{name, argv, timeout}] as JSON on stdin, runs them all concurrently,
# prints {name: [rc, stdout, stderr]}. Argv lists end to end: nothing is joined into a shell line.
BATCH_SOURCE = """\
import json, subprocess, sys, threading
jobs = json.load(sys.stdin)
out = {}
def run(job):
    try:
        p = subprocess.run(job["argv"], capture_output=True, timeout=job["timeout"], stdin=subprocess.DEVNULL)
        out[job["name"]] = [p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")]
    except FileNotFoundError:
        out[job["name"]] = [127, "", job["argv"][0] + ": command not found"]
    except subprocess.TimeoutExpired:
        out[job["name"]] = [124, "", "timed out after %ss" % job["timeout"]]
    except Exception as exc:
        out[job["name"]] = [126, "", "%s: %s" % (job["argv"][0], exc)]
threads = [threading.Thread(target=run, args=(j,)) for j in jobs]
[t.start() for t in threads]
[t.join() for t in threads]
json.dump(out, sys.stdout)
"""
BATCH_ARGV = ["python3", "-c", BATCH_SOURCE]


class ProbeError(SparkctlError):
    """A probe's command failed or printed what its parser cannot read (one line + fix)."""

    def __init__(self, message: str, fix: str | None = None, node: str | None = None) -> None:
        super().__init__(message, fix=fix, node=node)


def checked_stdout(res: RunResult, what: str, fix: str | None = None) -> str:
    if res.rc != 0:
        detail = (res.stderr or res.stdout).strip().splitlines()
        raise ProbeError(f"{what} failed (exit {res.rc}): {detail[-1] if detail else 'no output'}", fix)
    return res.stdout


def sh_argv(script: str, *args: str) -> list[str]:
    """A constant script with its inputs as positional parameters (never interpolated)."""
    return ["sh", "-c", script, "sparkctl", *args]


@dataclass(frozen=True)
class Probe:
    """One command on a node and how to read its result (raise ProbeError when it failed)."""

    argv: tuple[str, ...]
    parse: Callable[[RunResult], Any]
    timeout: float = PROBE_TIMEOUT

    def run(self, conn: Connector) -> Any:
        return self.parse(conn.run(list(self.argv), timeout=self.timeout))


def checked(what: str, parse: Callable[[str], Any], fix: str | None = None) -> Callable[[RunResult], Any]:
    return lambda res: parse(checked_stdout(res, what, fix))


def run_batch(conn: Connector, probes: Mapping[str, Probe]) -> dict[str, Any]:
    """Run probes concurrently on the node in ONE exec; {name: parsed value | exception}.

    Falls back to one exec per probe when the node has no python3."""
    if not probes:
        return {}
    jobs = [{"name": n, "argv": list(p.argv), "timeout": p.timeout} for n, p in probes.items()]
    res = conn.run(
        BATCH_ARGV, input=json.dumps(jobs).encode(), timeout=max(p.timeout for p in probes.values()) + 10
    )
    raw: dict[str, RunResult] = {}
    if res.ok:
        try:
            results = json.loads(res.stdout.strip().splitlines()[-1])  # a login script may print first
        except (ValueError, IndexError):
            return {
                n: ProbeError(f"probe batch on {conn.node}: unreadable output {res.stdout[-200:]!r}")
                for n in probes
            }
        for name, (rc, out, err) in results.items():
            raw[name] = RunResult(conn.node, tuple(probes[name].argv), rc, out, err)
    elif res.rc != 127:  # the batch itself failed (timeout, killed): do not run every probe twice
        why = (res.stderr or res.stdout).strip().splitlines()
        return {
            n: ProbeError(f"probe batch on {conn.node} failed (exit {res.rc}): {why[-1] if why else ''}")
            for n in probes
        }
    else:  # no python3 on the node: one exec per probe, few at a time (sshd's MaxSessions is 10)
        from sparkctl.fanout import fan_out

        def one(name: str) -> RunResult:
            return conn.run(list(probes[name].argv), timeout=probes[name].timeout)

        got = fan_out(list(probes), one, max_workers=4, where=lambda _: (conn.node, None))
        raw = got.ok
        if got.errors:
            return {**got.errors, **_parse_all(probes, raw)}
    return _parse_all(probes, raw)


def _parse_all(probes: Mapping[str, Probe], raw: Mapping[str, RunResult]) -> dict[str, Any]:
    out: dict[str, Any] = {n: ProbeError(f"{probes[n].argv[0]}: no result") for n in probes if n not in raw}
    for name, result in raw.items():
        try:
            out[name] = probes[name].parse(result)
        except Exception as exc:  # noqa: BLE001 - a parse/probe failure is that probe's result
            out[name] = exc
    return out
