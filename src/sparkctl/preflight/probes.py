"""Discovery probes: a constant argv run through a node's connector, parsed purely.

Each `Probe` pairs an argv with its parser. Use one alone (`probe.run(conn)`), or many at
once with `run_batch` (preflight, and `sparkctl init`'s discovery, use these very probes), which runs them concurrently ON the node in one SSH exec (an exec costs
an sshd session; a preflight needs ~10 probes per node). Parsers live in parsers.py, rdma.py and
sparkctl.gpu.probe.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparkctl.connectors.base import RunResult
from sparkctl.errors import SparkctlError
from sparkctl.gpu.probe import MEMINFO_ARGV, QUERY_ARGV, GpuReport, parse_meminfo, report_from_smi
from sparkctl.preflight.parsers import (
    SPEEDS_MARK,
    DiskUsage,
    parse_df,
    parse_listening_ports,
    parse_netdevs,
    parse_ping,
    parse_repo_listing,
)
from sparkctl.preflight.rdma import SYSFS_SCRIPT, RdmaDevice, parse_sysfs_dump

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector

PROBE_TIMEOUT = 20.0

NETDEV_SCRIPT = f"""ip -j addr show || exit $?
echo '{SPEEDS_MARK}'
for d in /sys/class/net/*; do s=; IFS= read -r s < "$d/speed" 2>/dev/null; echo "${{d##*/}} $s"; done
"""

# $1 = repo dir (<hf_cache>/hub/models--org--name).
SNAPSHOT_SCRIPT = r"""
d="$1"
[ -d "$d" ] || { echo norepo; exit 0; }
if [ -d "$d/refs" ]; then
  find "$d/refs" -type f | while IFS= read -r f; do c=; IFS= read -r c < "$f"; printf 'ref\t%s\t%s\n' "${f#"$d"/refs/}" "$c"; done
fi
for s in "$d"/snapshots/*/; do
  [ -d "$s" ] || continue
  n=$(ls -A "$s" | wc -l)
  s=${s%/}; printf 'snap\t%s\t%s\n' "${s##*/}" "$n"
done
"""

# $1 = a path that may not exist yet: report the filesystem that would hold it.
DF_SCRIPT = 'p="$1"; while [ ! -e "$p" ] && [ "$p" != / ]; do p=$(dirname "$p"); done; df -Pk "$p"'
PROC_NET_TCP_ARGV = ["cat", "/proc/net/tcp", "/proc/net/tcp6"]
NVIDIA_HOOK_SCRIPT = "command -v nvidia-container-runtime-hook || command -v nvidia-ctk"

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


def _checked(what: str, parse: Callable[[str], Any], fix: str | None = None) -> Callable[[RunResult], Any]:
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
        return {n: ProbeError(f"probe batch on {conn.node} failed (exit {res.rc}): {why[-1] if why else ''}")
                for n in probes}  # fmt: skip
    else:  # no python3 on the node: one exec per probe, few at a time (sshd's MaxSessions is 10)
        from sparkctl.connectors.pool import fan_out

        got = fan_out(list(probes), lambda n: conn.run(list(probes[n].argv), timeout=probes[n].timeout),
                      max_workers=4)  # fmt: skip
        raw = {n: r for n, r in got.items() if isinstance(r, RunResult)}
        missing = {n: r for n, r in got.items() if not isinstance(r, RunResult)}
        if missing:
            return {**missing, **_parse_all(probes, raw)}
    return _parse_all(probes, raw)


def _parse_all(probes: Mapping[str, Probe], raw: Mapping[str, RunResult]) -> dict[str, Any]:
    out: dict[str, Any] = {n: ProbeError(f"{probes[n].argv[0]}: no result") for n in probes if n not in raw}
    for name, result in raw.items():
        try:
            out[name] = probes[name].parse(result)
        except Exception as exc:  # noqa: BLE001 - a parse/probe failure is that probe's result
            out[name] = exc
    return out


# ----------------------------------------------------------------------------- the probes
def netdevs_probe() -> Probe:
    """Every netdev with MTU, state, IPv4 addresses and (sysfs) speed."""
    return Probe(
        tuple(sh_argv(NETDEV_SCRIPT)),
        _checked("ip -j addr show", parse_netdevs, "install iproute2 (>= 4.14)"),
    )


def rdma_probe(sysfs_root: str = "/sys") -> Probe:
    """RoCE devices with ports, GIDs and bound netdevs (parse raises rdma.NoRdma without RDMA drivers)."""
    return Probe(tuple(sh_argv(SYSFS_SCRIPT, sysfs_root)), _checked("reading RDMA sysfs", parse_sysfs_dump))


def ping_probe(ip: str, *, size: int | None = None, iface: str | None = None, count: int = 2) -> Probe:
    """Ping from the node; with `size`, a don't-fragment ping of exactly that payload."""
    argv = ["ping", "-n", "-c", str(count), "-i", "0.2", "-W", "1"]  # 0.2 s: the unprivileged minimum
    if size is not None:
        argv += ["-M", "do", "-s", str(size)]
    if iface:
        argv += ["-I", iface]
    return Probe((*argv, ip), lambda r: parse_ping(r.rc, r.stdout, r.stderr), timeout=count * 0.2 + 5)


def ssh_probe(host: str, *, port: int = 22, user: str | None = None, timeout: int = 5) -> Probe:
    """`ssh host true` run ON the node, non-interactively, strict about host keys (returns RunResult)."""
    target = f"{user}@{host}" if user else host
    argv = ("ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={timeout}", "-o", "StrictHostKeyChecking=yes",
            "-p", str(port), "--", target, "true")  # fmt: skip  ("--": target is never an option)
    return Probe(argv, lambda r: r, timeout=timeout + 5)


def ports_probe() -> Probe:
    return Probe(tuple(PROC_NET_TCP_ARGV), _checked("reading /proc/net/tcp", parse_listening_ports))


def meminfo_probe() -> Probe:
    return Probe(tuple(MEMINFO_ARGV), _checked("reading /proc/meminfo", parse_meminfo))


# The query (its argv as $@), then the head of `nvidia-smi -q` for the driver's CUDA version
# (not a --query-gpu field; without it CUDA drift between nodes would go unseen).
GPUS_SCRIPT = """nvidia-smi "$@" || exit $?
echo '@@sparkctl-smi-header@@'
nvidia-smi -q 2>/dev/null | head -n 40
"""


def _parse_gpus(res: RunResult) -> GpuReport | None:
    if res.rc == 127 or (res.rc and "not found" in res.stderr.lower()):
        return None
    out = checked_stdout(res, "nvidia-smi", "check the NVIDIA driver (`nvidia-smi` must work on the node)")
    query, _, header = out.partition("@@sparkctl-smi-header@@\n")
    return report_from_smi(query, header)


def gpus_probe() -> Probe:
    """GPUs via nvidia-smi (sparkctl.gpu.probe's parsers); None when the node has no nvidia-smi.
    Add MemAvailable with `report.with_meminfo(...)` from meminfo_probe."""
    return Probe(tuple(sh_argv(GPUS_SCRIPT, *QUERY_ARGV[1:])), _parse_gpus)


def nvidia_hook_probe() -> Probe:
    return Probe(tuple(sh_argv(NVIDIA_HOOK_SCRIPT)), lambda r: r.ok)


def df_probe(path: str) -> Probe:
    return Probe(tuple(sh_argv(DF_SCRIPT, path)), _checked(f"df {path}", lambda t: parse_df(t, path)))


def du_probe(path: str) -> Probe:
    """Bytes of a snapshot with its symlinks followed (the blobs it points at)."""
    return Probe(
        ("du", "-sLk", path), _checked(f"du {path}", lambda t: int(t.split()[0]) * 1024), timeout=120
    )


def repo_probe(repo_dir: str) -> Probe:
    return Probe(
        tuple(sh_argv(SNAPSHOT_SCRIPT, repo_dir)), _checked(f"listing {repo_dir}", parse_repo_listing)
    )



def probe_rdma(conn: Connector, sysfs_root: str = "/sys") -> dict[str, RdmaDevice]:
    return rdma_probe(sysfs_root).run(conn)




def probe_df(conn: Connector, path: str) -> DiskUsage:
    return df_probe(path).run(conn)



# ----------------------------------------------------------------------------- docker
@dataclass(frozen=True)
class DockerFacts:
    version: str
    runtimes: tuple[str, ...]
    default_runtime: str
    root_dir: str
    cdi_spec_dirs: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImageFacts:
    ref: str
    id: str
    size: int
    layers: tuple[str, ...] = ()
    created: str = ""
    repo_digests: tuple[str, ...] = ()


@dataclass(frozen=True)
class ContainerFacts:
    id: str
    name: str
    state: str  # running, exited, created...
    image: str
    labels: dict[str, str] = field(default_factory=dict)


def docker_facts_from_info(info: dict) -> DockerFacts:
    return DockerFacts(
        version=str(info.get("ServerVersion", "?")),
        runtimes=tuple(sorted((info.get("Runtimes") or {}).keys())),
        default_runtime=str(info.get("DefaultRuntime", "")),
        root_dir=str(info.get("DockerRootDir", "/var/lib/docker")),
        cdi_spec_dirs=tuple(info.get("CDISpecDirs") or ()),
    )


def image_facts_from_inspect(ref: str, attrs: dict) -> ImageFacts:
    return ImageFacts(
        ref=ref,
        id=str(attrs["Id"]),
        size=int(attrs.get("Size") or 0),
        layers=tuple((attrs.get("RootFS") or {}).get("Layers") or ()),
        created=str(attrs.get("Created", "")),
        repo_digests=tuple(attrs.get("RepoDigests") or ()),
    )


def containers_from_list(items: list[dict]) -> list[ContainerFacts]:
    return [
        ContainerFacts(
            id=str(c.get("Id", ""))[:12],
            name=(c.get("Names") or ["/?"])[0].lstrip("/"),
            state=str(c.get("State", "")),
            image=str(c.get("Image", "")),
            labels=dict(c.get("Labels") or {}),
        )
        for c in items
    ]


def probe_docker(conn: Connector) -> DockerFacts:
    try:
        return docker_facts_from_info(conn.docker().info())
    except ProbeError:
        raise
    except Exception as exc:  # noqa: BLE001 - ConnectError or docker errors: no usable engine
        raise ProbeError(
            f"Docker engine not reachable: {getattr(exc, 'message', None) or exc}",
            "install Docker, add the SSH user to the docker group, and check `docker info` on the node",
        ) from None


def probe_image(conn: Connector, ref: str) -> ImageFacts | None:
    """The image as the node's engine has it; None when absent."""
    import docker.errors

    try:
        return image_facts_from_inspect(ref, conn.docker().api.inspect_image(ref))
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        if exc.status_code == 404:
            return None
        raise ProbeError(f"inspecting image {ref}: {exc.explanation or exc}") from None


def probe_containers(conn: Connector) -> list[ContainerFacts]:
    return containers_from_list(conn.docker().api.containers(all=True))
