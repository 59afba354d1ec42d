"""NCCL as baked into an image: `/etc/nccl.conf` (and the image user's `~/.nccl.conf`), `NCCL_*` in the
image's env, and the NCCL libraries a process in it can load, read without a GPU.

The env comes from the image's config (`docker image inspect`); the files from one short container
(`sh` as entrypoint, no network, no GPU, removed at once) that prints the conf files and lists the
NCCL libraries: `libnccl.so.<version>` files (the system's, e.g. from apt) and pip's
`nvidia_nccl_cu*-<version>.dist-info` (the wheel torch links; its lib is only `libnccl.so.2`).
Two different versions in one image means torch and a `ctypes.CDLL("libnccl.so.2")` loader (an
engine's own NCCL wrapper) may load different NCCLs in one process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkctl.facts.probe import Probe, ProbeError, checked

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector

MARK = "#sparkctl-nccl"
NCCL_DIRS = "/usr/lib /usr/local/lib /usr/lib64 /opt"
# The libraries found, then each real file's sha256 (its build identity: two builds of one version
# differ here: TP=2 hung on two 2.28.9 builds, docs/preflight.md). The same lines run on the host.
LIBS = f"""echo "{MARK} libs"
find {NCCL_DIRS} -xdev \\( -name 'libnccl.so*' -o -name 'nvidia_nccl_cu*.dist-info' \\) 2>/dev/null
echo "{MARK} builds"
find {NCCL_DIRS} -xdev -type f -name 'libnccl.so*' -exec sha256sum {{}} + 2>/dev/null
echo "{MARK} end"
"""
SCRIPT = f"""for f in /etc/nccl.conf "$HOME/.nccl.conf"; do
  [ -r "$f" ] && {{ echo "{MARK} conf $f"; cat "$f"; echo; }}
done
{LIBS}"""
HOST_ARGV = ("sh", "-c", LIBS)  # the host's own NCCL, read over SSH (no container)


@dataclass
class ImageNcclFacts:
    env: dict[str, str] = field(default_factory=dict)  # NCCL_* (and LD_LIBRARY_PATH) in the image config
    conf: dict[str, dict[str, str]] = field(default_factory=dict)  # file -> {key: value}
    libs: list[str] = field(default_factory=list)  # paths found
    system: dict[str, str] = field(default_factory=dict)  # libnccl.so.X.Y.Z path -> version
    pip: dict[str, str] = field(default_factory=dict)  # dist-info path -> version
    builds: dict[str, str] = field(default_factory=dict)  # real libnccl file -> sha256 of its bytes

    def version_of(self, path: str) -> str:
        """The NCCL version a library file is: from its name, else the pip wheel beside it."""
        if m := re.search(r"libnccl\.so\.(\d+\.\d+\.\d+)$", path):
            return m.group(1)
        site = path.split("/nvidia/nccl/", 1)[0] if "/nvidia/nccl/" in path else None
        pip = [v for d, v in self.pip.items() if site and d.startswith(site + "/")]
        return pip[0] if len(pip) == 1 else "unknown version"

    @property
    def identities(self) -> dict[str, set[str]]:
        """version -> the sha256 of every build of it found."""
        out: dict[str, set[str]] = {}
        for path, digest in self.builds.items():
            out.setdefault(self.version_of(path), set()).add(digest)
        return out

    @property
    def versions(self) -> set[str]:
        return set(self.system.values()) | set(self.pip.values())

    def to_json(self) -> dict:
        return {
            "env": self.env,
            "conf": self.conf,
            "system": self.system,
            "pip": self.pip,
            "builds": self.builds,
        }


def parse_conf(text: str) -> dict[str, str]:
    """nccl.conf: `KEY=VALUE` lines, `#` comments (NCCL's own format)."""
    out = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        key, eq, value = line.partition("=")
        if eq and key.strip():
            out[key.strip()] = value.strip()
    return out


def parse_listing(text: str, env: dict[str, str] | None = None) -> ImageNcclFacts:
    out = ImageNcclFacts(env=dict(env or {}))
    section, lines = "", []
    for line in [*text.splitlines(), f"{MARK} end"]:
        if line.startswith(MARK):
            if section.startswith("conf "):
                out.conf[section[5:]] = parse_conf("\n".join(lines))
            section, lines = line[len(MARK) :].strip(), []
        elif section == "libs" and line.strip():
            _lib(out, line.strip())
        elif section == "builds" and (m := re.match(r"^([0-9a-f]{64})\s+\*?(/.+)$", line.strip())):
            out.builds[m.group(2)] = m.group(1)
        else:
            lines.append(line)
    return out


def _lib(out: ImageNcclFacts, path: str) -> None:
    out.libs.append(path)
    name = path.rsplit("/", 1)[-1]
    if m := re.match(r"nvidia_nccl_cu\d+-(\d+\.\d+\.\d+)", name):
        out.pip[path] = m.group(1)
    elif m := re.match(r"libnccl\.so\.(\d+\.\d+\.\d+)$", name):
        out.system[path] = m.group(1)


def host_nccl_probe() -> Probe:
    """The host's NCCL libraries and their builds, read with the same lines as in the image."""
    return Probe(HOST_ARGV, checked("reading the host's NCCL libraries", parse_listing))


def env_of(attrs: dict) -> dict[str, str]:
    """NCCL_* and LD_LIBRARY_PATH from `docker image inspect`'s Config.Env."""
    out = {}
    for item in (attrs.get("Config") or {}).get("Env") or []:
        key, _, value = str(item).partition("=")
        if key.startswith("NCCL_") or key == "LD_LIBRARY_PATH":
            out[key] = value
    return out


def probe_image_nccl(conn: Connector, ref: str) -> ImageNcclFacts:
    """Read the image's NCCL setup through the node's engine: inspect, then one short container."""
    import docker.errors

    client = conn.docker()
    try:
        env = env_of(client.api.inspect_image(ref))
        raw = client.containers.run(
            ref, entrypoint=["sh", "-c", SCRIPT], remove=True, network_disabled=True, stderr=False
        )
    except docker.errors.ContainerError as exc:
        raise ProbeError(f"reading NCCL files in {ref}: the container failed ({exc.exit_status})") from None
    except docker.errors.APIError as exc:
        raise ProbeError(f"reading NCCL files in {ref}: {exc.explanation or exc}") from None
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    if f"{MARK} end" not in text:
        raise ProbeError(f"reading NCCL files in {ref}: no sh in the image? output {text[:120]!r}")
    return parse_listing(text, env)
