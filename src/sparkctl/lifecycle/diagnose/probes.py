"""The per-node facts a maintainer asks for first, as raw text: constant argv probes run in the
node's one batch (facts/probe.py), each bounded by its own timeout. A probe that fails keeps its
exit code and stderr: "nvidia-smi: command not found" is a fact too."""

from __future__ import annotations

from sparkctl.connectors.base import RunResult
from sparkctl.facts.probe import Probe, sh_argv

PROBE_TIMEOUT = 15.0


def raw(res: RunResult) -> dict:
    return {"rc": res.rc, "stdout": res.stdout, "stderr": res.stderr}


def _p(*argv: str, timeout: float = PROBE_TIMEOUT) -> Probe:
    return Probe(tuple(argv), raw, timeout)


def _sh(script: str, timeout: float = PROBE_TIMEOUT) -> Probe:
    return Probe(tuple(sh_argv(script)), raw, timeout)


# Every netdev's speed (Mb/s), MTU and state from sysfs: what a slow or fragmenting link shows.
_LINKS = (
    'for d in /sys/class/net/*; do n=${d##*/}; printf "%s speed=%s mtu=%s state=%s\\n" "$n" '
    '"$(cat "$d/speed" 2>/dev/null || echo -)" "$(cat "$d/mtu" 2>/dev/null)" '
    '"$(cat "$d/operstate" 2>/dev/null)"; done'
)
# The kernel's lines about the GPU driver (NVRM, Xid) and the OOM killer, the last 200.
_KERNEL_LOG = (
    "{ dmesg -T 2>/dev/null || journalctl -k -b --no-pager -q 2>/dev/null; } "
    "| grep -iE 'NVRM|Xid|oom|out of memory' | tail -n 200"
)
_PSI = 'for f in /proc/pressure/*; do echo "== $f"; cat "$f"; done'

NODE_PROBES: dict[str, Probe] = {
    "kernel.txt": _p("uname", "-a"),
    "os-release.txt": _p("cat", "/etc/os-release"),
    "driver.txt": _p("nvidia-smi", "--query-gpu=name,driver_version,vbios_version", "--format=csv"),
    "nvidia-smi.txt": _p("nvidia-smi"),  # its header names the driver and the CUDA version
    "nvidia-smi-q.txt": _p("nvidia-smi", "-q", timeout=30.0),
    "cuda-version.txt": _sh("cat /usr/local/cuda/version.json 2>/dev/null || nvcc --version"),
    "ibv_devinfo.txt": _p("ibv_devinfo", "-v"),
    "ip-addr.txt": _p("ip", "-d", "addr"),
    "links.txt": _sh(_LINKS),
    "docker-info.txt": _p("docker", "info"),
    "disk.txt": _p("df", "-h"),
    "memory.txt": _p("cat", "/proc/meminfo"),
    "psi.txt": _sh(_PSI),
    "kernel-log.txt": _sh(_KERNEL_LOG, timeout=20.0),
}
