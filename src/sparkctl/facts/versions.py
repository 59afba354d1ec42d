"""The software stack a node serves with: kernel, NVIDIA driver and CUDA, DOCA/OFED, ConnectX
firmware, CmaTotal, the NVIDIA container toolkit and Docker. One constant script, one pure parser.

Every field is read best-effort: a missing tool gives an empty value (unknown, never evidence of a
difference). Firmware is read under the sysfs root, like the RoCE devices.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from sparkctl.facts.probe import Probe, checked, sh_argv

# $1 = sysfs root. Tab-separated `key value` lines (fw: `fw dev version`).
VERSIONS_SCRIPT = r"""
printf 'kernel\t%s\n' "$(uname -r 2>/dev/null)"
v=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
[ -n "$v" ] || v=$(sed -n 's/.*Kernel Module *\([0-9][0-9.]*\).*/\1/p' /proc/driver/nvidia/version 2>/dev/null | head -n 1)
printf 'driver\t%s\n' "$v"
printf 'cuda\t%s\n' "$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9.]*\).*/\1/p' | head -n 1)"
printf 'ofed\t%s\n' "$(ofed_info -s 2>/dev/null | head -n 1)"
printf 'doca\t%s\n' "$(dpkg-query -W -f '${Version}' doca-runtime 2>/dev/null || dpkg-query -W -f '${Version}' doca-ofed 2>/dev/null)"
for f in "$1"/class/infiniband/*/fw_ver; do
  [ -r "$f" ] || continue
  d=${f%/fw_ver}; IFS= read -r v < "$f"; printf 'fw\t%s\t%s\n' "${d##*/}" "$v"
done
printf 'cma\t%s\n' "$(sed -n 's/^CmaTotal: *//p' /proc/meminfo 2>/dev/null)"
printf 'toolkit\t%s\n' "$(nvidia-ctk --version 2>/dev/null | head -n 1)"
printf 'docker\t%s\n' "$(dockerd --version 2>/dev/null | head -n 1)"
"""

FIELDS = ("kernel", "driver", "cuda", "ofed", "doca", "firmware", "cma_kb", "toolkit", "docker")


@dataclass
class NodeVersions:
    kernel: str = ""
    driver: str = ""
    cuda: str = ""
    ofed: str = ""  # MLNX/DOCA OFED as `ofed_info -s` says it, e.g. 24.10-1.1.4.0
    doca: str = ""
    firmware: dict[str, str] = field(default_factory=dict)  # RoCE device -> fw_ver
    cma_kb: int | None = None
    toolkit: str = ""
    docker: str = ""

    def value(self, name: str) -> str:
        """One field as text ("" = unknown); firmware as the set of versions of the ConnectX."""
        if name == "firmware":
            return ",".join(sorted(set(self.firmware.values())))
        if name == "cma_kb":
            return "" if self.cma_kb is None else f"{self.cma_kb} kB"
        return str(getattr(self, name))

    def to_json(self) -> dict:
        return asdict(self)


def _after(pattern: str, text: str) -> str:
    m = re.search(pattern, text)
    return m.group(1) if m else text.strip()


def parse_versions(text: str) -> NodeVersions:
    out = NodeVersions()
    for line in text.splitlines():
        key, _, rest = line.partition("\t")
        rest = rest.strip()
        if key == "fw":
            dev, _, ver = rest.partition("\t")
            if dev and ver.strip():
                out.firmware[dev] = ver.strip()
        elif key == "cma":
            m = re.match(r"(\d+)", rest)
            out.cma_kb = int(m.group(1)) if m else None
        elif key == "ofed":
            out.ofed = _after(r"(\d+\.\d+(?:-[\d.]+)?)", rest)
        elif key == "toolkit":
            out.toolkit = _after(r"version\s+(\S+)", rest)
        elif key == "docker":
            out.docker = _after(r"version\s+([^,\s]+)", rest)
        elif key in ("kernel", "driver", "cuda", "doca"):
            setattr(out, key, rest)
    return out


def versions_probe(sysfs_root: str = "/sys") -> Probe:
    return Probe(tuple(sh_argv(VERSIONS_SCRIPT, sysfs_root)), checked("reading versions", parse_versions))
