"""What one node is, for `sparkctl init`: gathered with the probes of sparkctl.facts over the node's connector.

Every command is one of `sparkctl.facts` (netdevs, RDMA sysfs, GPUs, meminfo, NVIDIA
hook, HF repo listings, Docker) except the two that only init needs: the hostname and the list of
HF cache dirs with their repos. Two execs per node (`run_batch`), plus the Docker API.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparkctl.engines import DEFAULT_ENGINE
from sparkctl.errors import SparkctlError
from sparkctl.facts.docker import DockerFacts, nvidia_hook_probe, probe_docker
from sparkctl.facts.gpu import gpus_probe, meminfo_probe
from sparkctl.facts.hfcache import RepoListing, repo_dir, repo_probe
from sparkctl.facts.net import Netdev, netdevs_probe
from sparkctl.facts.probe import Probe, checked_stdout, run_batch, sh_argv
from sparkctl.facts.rdma import NoRdma, RdmaDevice, rdma_probe

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector
    from sparkctl.facts.gpu import GpuReport

# $@ = caches the user named. Prints `cache\t<source>\t<path>` per cache dir that has a hub/, then
# `repo\t<path>\t<models--org--name>` per repo in it. `~/` is expanded here, on the node.
CACHES_SCRIPT = r"""
list() {
  [ -d "$2/hub" ] || return 0
  printf 'cache\t%s\t%s\n' "$1" "$2"
  for r in "$2"/hub/models--*/; do [ -d "$r" ] && { r=${r%/}; printf 'repo\t%s\t%s\n' "$2" "${r##*/}"; }; done
}
for c in "$@"; do case "$c" in "~/"*) c="$HOME/${c#"~/"}";; esac; list given "$c"; done
[ -n "$HF_HOME" ] && list HF_HOME "$HF_HOME"
list default "$HOME/.cache/huggingface"
"""


@dataclass(frozen=True)
class EngineImage:
    """A local serving image: which engine it carries (the engines' own markers) and its version."""

    ref: str
    id: str
    size: int
    version: str | None = None  # the engine's version label
    engine: str = DEFAULT_ENGINE  # the engine.kind it serves with


@dataclass(frozen=True)
class HfCache:
    path: str  # as resolved on the node
    source: str  # "given" (--hf-cache), "HF_HOME" or "default" (~/.cache/huggingface)
    repos: dict[str, RepoListing] = field(default_factory=dict)  # "org/name" -> listing

    def models(self) -> list[str]:
        """Repo ids with at least one non-empty snapshot."""
        return sorted(r for r, li in self.repos.items() if any(li.snapshots.values()))


@dataclass
class NodeDiscovery:
    host: str  # as the user named it ('local' = this machine)
    name: str  # node name for the profile (from the hostname, made unique later)
    hostname: str
    description: str  # how we reached it, e.g. root@10.0.0.2:22
    ssh_ip: str | None  # the address SSH actually connected to (None: local)
    netdevs: dict[str, Netdev]
    rdma: dict[str, RdmaDevice] = field(default_factory=dict)
    gpus: GpuReport | None = None
    mem_total_kib: int | None = None
    docker: DockerFacts | None = None
    nvidia_hook: bool = False
    images: list[EngineImage] = field(default_factory=list)
    caches: list[HfCache] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # failed probes that do not stop init

    @property
    def gpu_count(self) -> int:
        return len(self.gpus.gpus) if self.gpus is not None else 0

    @property
    def nvidia_runtime(self) -> bool:
        d = self.docker
        return d is not None and ("nvidia" in d.runtimes or d.default_runtime == "nvidia" or self.nvidia_hook)

    def models(self) -> set[str]:
        return {m for c in self.caches for m in c.models()}


# ----------------------------------------------------------------------------- pure parsers
def parse_caches(text: str) -> list[tuple[str, str, list[str]]]:
    """CACHES_SCRIPT output -> [(source, path, [repo ids])], first mention of a path wins."""
    order: list[tuple[str, str]] = []
    repos: dict[str, list[str]] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if parts[0] == "cache" and len(parts) == 3 and parts[2] not in repos:
            order.append((parts[1], parts[2]))
            repos[parts[2]] = []
        elif parts[0] == "repo" and len(parts) == 3 and parts[2].startswith("models--"):
            rid = parts[2].removeprefix("models--").replace("--", "/")
            if parts[1] in repos and rid not in repos[parts[1]]:
                repos[parts[1]].append(rid)
    return [(src, path, repos[path]) for src, path in order]


def _engine_of(tags: list[str], labels: dict) -> tuple[str | None, str | None]:
    """(engine, version label) of an image: the first engine whose marker (engines' `images.markers`)
    is in a tag or a label key; the version from a label whose key names it and "version"."""
    from sparkctl.engines import ENGINE_NAMES, get_engine

    for name in ENGINE_NAMES:
        images = get_engine(name).images
        for mark in images.markers if images else ():
            version = next(
                (str(v) for k, v in labels.items() if mark in k.lower() and "version" in k.lower()), None
            )
            if version or any(mark in t.lower() for t in tags) or any(mark in k.lower() for k in labels):
                return name, version
    return None, None


def engine_images_from_list(items: list[dict], also: str | None = None) -> list[EngineImage]:
    """Local images that carry a serving engine: an engine's marker (`ImageMarkers.markers`) in a tag or
    a label (versions from such a label); `also`: the image the user named (`init --image REF`),
    listed whatever its name."""
    want = {also, f"{also}:latest"} if also and ":" not in also.rsplit("/", 1)[-1] else {also}
    out = []
    for item in items:
        tags = [t for t in item.get("RepoTags") or [] if t and t != "<none>:<none>"]
        labels = item.get("Labels") or {}
        engine, version = _engine_of(tags, labels)
        listed = tags if engine else []
        if also and want & set(tags) and also not in listed:  # e.g. `--image repo` for repo:latest
            listed = [*listed, also]
        size = int(item.get("Size") or 0)
        kind = engine or DEFAULT_ENGINE
        out += [EngineImage(t, str(item.get("Id", "")), size, version, kind) for t in listed]
    return sorted(out, key=lambda i: i.ref)


# ----------------------------------------------------------------------------- probes
def hostname_probe() -> Probe:
    return Probe(("uname", "-n"), lambda r: checked_stdout(r, "uname -n").strip())


def caches_probe(hf_cache: str | None) -> Probe:
    args = [hf_cache] if hf_cache else []
    return Probe(
        tuple(sh_argv(CACHES_SCRIPT, *args)),
        lambda r: parse_caches(checked_stdout(r, "listing HF caches")),
    )


def probe_engine_images(conn: Connector, also: str | None = None) -> list[EngineImage]:
    return engine_images_from_list(conn.docker().api.images(), also)


def _ssh_ip(conn: Connector) -> str | None:
    client = getattr(conn, "client", None)  # SshConnector only
    if client is None:
        return None
    transport = client.get_transport()
    return str(transport.getpeername()[0]) if transport is not None else None


def _why(exc: BaseException) -> str:
    return getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"


def _gpus(gpus: Any, meminfo: Any, problems: list[str]) -> tuple[GpuReport | None, int | None]:
    """The GPU report with MemAvailable, and MemTotal (kiB); a failed probe is a problem, not an error."""
    if isinstance(gpus, Exception):
        problems.append(f"GPUs: {_why(gpus)}")
        gpus = None
    mem_total = meminfo.get("MemTotal") if isinstance(meminfo, dict) else None
    if gpus is not None and isinstance(meminfo, dict):
        gpus = gpus.with_meminfo(meminfo)
    return gpus, mem_total


def _caches(conn: Connector, listing: Any, problems: list[str]) -> list[HfCache]:
    """The HF caches found on the node, each with the listing of every repo in it (one more exec)."""
    caches: list[HfCache] = []
    if isinstance(listing, Exception):
        problems.append(f"HF caches: {_why(listing)}")
        return caches
    if not listing:
        return caches
    repo_probes = {
        f"{i}:{rid}": repo_probe(repo_dir(path, rid))
        for i, (_, path, rids) in enumerate(listing)
        for rid in rids
    }
    repos = run_batch(conn, repo_probes)
    for i, (source, path, rids) in enumerate(listing):
        got = {rid: repos.get(f"{i}:{rid}") for rid in rids}
        caches.append(HfCache(path, source, {r: v for r, v in got.items() if isinstance(v, RepoListing)}))
    return caches


def gather(
    conn: Connector,
    host: str,
    *,
    sysfs_root: str = "/sys",
    hf_cache: str | None = None,
    image: str | None = None,
) -> NodeDiscovery:
    """Discover one node. Raises SparkctlError only when its netdevs cannot be listed."""
    from sparkctl.fanout import fan_out

    shell = {
        "hostname": hostname_probe(),
        "netdevs": netdevs_probe(),
        "rdma": rdma_probe(sysfs_root),
        "gpus": gpus_probe(),
        "meminfo": meminfo_probe(),
        "hook": nvidia_hook_probe(),
        "caches": caches_probe(hf_cache),
    }

    def docker() -> tuple[DockerFacts, list[EngineImage]]:
        facts = probe_docker(conn)
        return facts, probe_engine_images(conn, image)

    tasks = {"shell": lambda: run_batch(conn, shell), "docker": docker}
    done = fan_out(list(tasks), lambda k: tasks[k](), where=lambda _: (host, None))
    if not done["shell"].ok:
        raise done["shell"].error  # type: ignore[misc]
    res: dict[str, Any] = done["shell"].value  # type: ignore[assignment]
    problems: list[str] = []

    netdevs = res.get("netdevs")
    if not isinstance(netdevs, dict):
        raise SparkctlError(
            f"cannot list the netdevs of {host}: {_why(netdevs) if netdevs else 'no result'}",
            fix=getattr(netdevs, "fix", None) or "install iproute2 (>= 4.14) on the node",
            node=host,
        )
    hostname = res.get("hostname")
    if not isinstance(hostname, str):
        problems.append(f"hostname: {_why(hostname)}")
        hostname = ""
    rdma = res.get("rdma")
    if isinstance(rdma, Exception):
        if not isinstance(rdma, NoRdma):  # no RDMA drivers: simply no RoCE
            problems.append(f"RDMA sysfs: {_why(rdma)}")
        rdma = {}
    gpus, mem_total = _gpus(res.get("gpus"), res.get("meminfo"), problems)

    docker_facts, images = None, []
    if not done["docker"].ok:
        problems.append(f"Docker: {_why(done['docker'].error)}")
    else:
        docker_facts, images = done["docker"].value  # type: ignore[misc]

    caches = _caches(conn, res.get("caches"), problems)
    return NodeDiscovery(
        host=host,
        name=hostname.split(".", 1)[0],
        hostname=hostname,
        description=conn.description,
        ssh_ip=_ssh_ip(conn),
        netdevs=netdevs,
        rdma=rdma,
        gpus=gpus,
        mem_total_kib=mem_total,
        docker=docker_facts,
        nvidia_hook=res.get("hook") is True,
        images=images,
        caches=caches,
        problems=problems,
    )


__all__ = ["HfCache", "NodeDiscovery", "EngineImage", "gather", "parse_caches"]
