"""Read a node's GPUs: pure parsers of `nvidia-smi` and a torch fallback, and their probes.

The commands are argv lists the caller runs on the node (any connector); everything here only
parses their text, so it is tested on outputs captured from real machines (tests/fixtures/gpu/).

Unified memory: a GB10 (DGX Spark) has no dedicated GPU memory; `nvidia-smi` prints `[N/A]`
for memory.total and CUDA's "free" is MemFree, which ignores reclaimable page cache. What the
GPU can really take is the kernel's MemAvailable, so that is what we report for such GPUs.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

from sparkctl.facts.probe import Probe, checked, checked_stdout, sh_argv

if TYPE_CHECKING:
    from sparkctl.connectors.base import RunResult

QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "memory.total",
    "memory.used",
    "memory.free",
    "driver_version",
    "compute_cap",
)
QUERY_ARGV: list[str] = [
    "nvidia-smi",
    f"--query-gpu={','.join(QUERY_FIELDS)}",
    "--format=csv,noheader,nounits",
]
# The header of `nvidia-smi -q` carries the driver and CUDA versions (the CSV has no CUDA field).
HEADER_ARGV: list[str] = ["nvidia-smi", "-q"]
MEMINFO_ARGV: list[str] = ["cat", "/proc/meminfo"]

# Run with the node's (or image's) python when nvidia-smi is missing; prints one JSON object.
TORCH_PROBE_SOURCE = """\
import json, torch
out = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": []}
if torch.cuda.is_available():
    try:
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:
        pass
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        free, total = torch.cuda.mem_get_info(i)
        out["gpus"].append({"index": i, "name": p.name, "capability": f"{p.major}.{p.minor}",
                            "total_memory": p.total_memory, "free_memory": free,
                            "integrated": bool(getattr(p, "is_integrated", False))})
print(json.dumps(out))
"""
TORCH_ARGV: list[str] = ["python3", "-c", TORCH_PROBE_SOURCE]

_MISSING = {"", "[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]"}
# GPUs that share the host's memory even where a driver reports a number for memory.total.
_UNIFIED_NAMES = ("GB10",)


class ProbeParseError(ValueError):
    """The text is not what the command prints (wrong command, truncated, another tool)."""


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str | None = None
    pci_bus_id: str | None = None
    memory_total_mib: int | None = None  # None: no dedicated memory reported (unified)
    memory_used_mib: int | None = None
    memory_free_mib: int | None = None
    compute_cap: str | None = None  # "9.0", "12.1"


@dataclass(frozen=True)
class GpuReport:
    """Everything sparkctl knows about one node's GPUs."""

    gpus: tuple[Gpu, ...]
    source: str  # "nvidia-smi" or "torch"
    driver_version: str | None = None
    cuda_version: str | None = None  # the driver's CUDA (nvidia-smi) or torch's build (torch)
    unified_memory: bool = False
    mem_available_mib: int | None = None  # host MemAvailable; the real budget when unified
    torch_version: str | None = None
    nccl_version: str | None = None
    extra: dict = field(default_factory=dict, compare=False)

    def with_meminfo(self, meminfo: dict[str, int] | None) -> GpuReport:
        """The report with the host's MemAvailable (kB, from /proc/meminfo) filled in."""
        if not meminfo or "MemAvailable" not in meminfo:
            return self
        return replace(self, mem_available_mib=meminfo["MemAvailable"] // 1024)

    @property
    def usable_memory_mib(self) -> int | None:
        """Memory one GPU can allocate: MemAvailable on unified parts, else the smallest free."""
        if self.unified_memory:
            return self.mem_available_mib
        free = [g.memory_free_mib for g in self.gpus if g.memory_free_mib is not None]
        return min(free) if free else None

    def to_json(self) -> dict:
        out = asdict(self)
        out["usable_memory_mib"] = self.usable_memory_mib
        return out


def _num(text: str) -> int | None:
    text = text.strip()
    if text in _MISSING:
        return None
    try:
        return int(float(text))
    except ValueError:
        return None


def _opt(text: str) -> str | None:
    text = text.strip()
    return None if text in _MISSING else text


def parse_query_gpu(text: str, fields: tuple[str, ...] = QUERY_FIELDS) -> list[Gpu]:
    """Parse `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`."""
    gpus = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(fields):
            raise ProbeParseError(
                f"nvidia-smi line {lineno}: {len(cells)} fields, expected {len(fields)}: {line!r}"
            )
        row = dict(zip(fields, cells, strict=True))
        try:
            index = int(row.get("index", len(gpus)))
        except ValueError as exc:
            raise ProbeParseError(f"nvidia-smi line {lineno}: bad index {row['index']!r}") from exc
        gpus.append(
            Gpu(
                index=index,
                name=row.get("name", "").strip(),
                uuid=_opt(row.get("uuid", "")),
                pci_bus_id=_opt(row.get("pci.bus_id", "")),
                memory_total_mib=_num(row.get("memory.total", "")),
                memory_used_mib=_num(row.get("memory.used", "")),
                memory_free_mib=_num(row.get("memory.free", "")),
                compute_cap=_opt(row.get("compute_cap", "")),
            )
        )
    return gpus


def driver_from_query(text: str, fields: tuple[str, ...] = QUERY_FIELDS) -> str | None:
    if "driver_version" not in fields:
        return None
    i = fields.index("driver_version")
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == len(fields):
            return _opt(cells[i])
    return None


# Drivers up to 5xx print "Driver Version" / "CUDA Version"; 610 prints "KMD Version" /
# "CUDA UMD Version" in the banner.
_HEADER_RE = {
    "driver_version": re.compile(r"(?:Driver|KMD) Version\s*:\s*([0-9][\w.]*)"),
    "cuda_version": re.compile(r"CUDA (?:UMD )?Version\s*:\s*([0-9][\w.]*)"),
}
# Plain `nvidia-smi` table: first line of a GPU block, then the one with memory usage.
_TABLE_GPU = re.compile(
    r"^\|\s+(\d+)\s+(.+?)\s+(?:On|Off)\s*\|\s*([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.\d)\s"
)
_TABLE_MEM = re.compile(r"\|\s*(?:(\d+)MiB\s*/\s*(\d+)MiB|(Not Supported|N/A))\s*\|")


def parse_smi_header(text: str) -> dict[str, str | None]:
    """Driver and CUDA versions from `nvidia-smi -q` or the banner of plain `nvidia-smi`."""
    out: dict[str, str | None] = {}
    for key, rx in _HEADER_RE.items():
        m = rx.search(text)
        out[key] = m.group(1) if m else None
    return out


def parse_smi_table(text: str) -> list[Gpu]:
    """GPUs from plain `nvidia-smi` (for drivers whose --query-gpu lacks a field, and for logs
    users paste). Names may be truncated by the table; memory is None when 'Not Supported'."""
    gpus: list[Gpu] = []
    pending: dict | None = None
    for line in text.splitlines():
        m = _TABLE_GPU.match(line)
        if m:
            pending = {"index": int(m.group(1)), "name": m.group(2).strip(), "pci_bus_id": m.group(3)}
            continue
        if pending is not None:
            mem = _TABLE_MEM.search(line)
            used = total = None
            if mem and mem.group(1):
                used, total = int(mem.group(1)), int(mem.group(2))
            gpus.append(
                Gpu(
                    **pending,
                    memory_used_mib=used,
                    memory_total_mib=total,
                    memory_free_mib=total - used if total is not None and used is not None else None,
                )
            )
            pending = None
    return gpus


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo -> {key: KiB}."""
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key.strip()] = int(parts[0])
    return out


def is_unified(gpu: Gpu) -> bool:
    return gpu.memory_total_mib is None or any(n in gpu.name for n in _UNIFIED_NAMES)


def _report(gpus: list[Gpu], source: str, header: dict, meminfo_text: str, **extra) -> GpuReport:
    avail = parse_meminfo(meminfo_text).get("MemAvailable") if meminfo_text else None
    return GpuReport(
        gpus=tuple(gpus),
        source=source,
        driver_version=header.get("driver_version"),
        cuda_version=header.get("cuda_version"),
        unified_memory=any(is_unified(g) for g in gpus),
        mem_available_mib=avail // 1024 if avail is not None else None,
        **extra,
    )


def report_from_smi(
    query_text: str, header_text: str = "", meminfo_text: str = "", fields: tuple[str, ...] = QUERY_FIELDS
) -> GpuReport:
    """From QUERY_ARGV's output, `nvidia-smi -q` (versions) and /proc/meminfo."""
    gpus = parse_query_gpu(query_text, fields)
    if not gpus:
        raise ProbeParseError("nvidia-smi listed no GPU")
    header = parse_smi_header(header_text) if header_text else {}
    header["driver_version"] = header.get("driver_version") or driver_from_query(query_text, fields)
    return _report(gpus, "nvidia-smi", header, meminfo_text)


def report_from_table(table_text: str, meminfo_text: str = "") -> GpuReport:
    """From plain `nvidia-smi` (older drivers reject `compute_cap` in --query-gpu)."""
    gpus = parse_smi_table(table_text)
    if not gpus:
        raise ProbeParseError("no GPU rows in the nvidia-smi table")
    return _report(gpus, "nvidia-smi", parse_smi_header(table_text), meminfo_text)


def report_from_torch(json_text: str, meminfo_text: str = "") -> GpuReport:
    """Parse TORCH_PROBE_SOURCE's output (used when nvidia-smi is not on the node)."""
    try:
        data = json.loads(json_text.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError) as exc:
        raise ProbeParseError(f"torch probe printed no JSON: {json_text[-200:]!r}") from exc
    gpus = []
    for g in data.get("gpus", []):
        integrated = bool(g.get("integrated")) or any(n in g["name"] for n in _UNIFIED_NAMES)
        gpus.append(
            Gpu(
                index=int(g["index"]),
                name=g["name"],
                compute_cap=g.get("capability"),
                # CUDA reports host memory for an integrated GPU; keep None so it is not trusted.
                memory_total_mib=None if integrated else int(g["total_memory"]) // (1 << 20),
                memory_free_mib=None if integrated else int(g["free_memory"]) // (1 << 20),
            )
        )
    return _report(
        gpus,
        "torch",
        {"cuda_version": data.get("cuda")},
        meminfo_text,
        torch_version=data.get("torch"),
        nccl_version=data.get("nccl"),
    )


# ----------------------------------------------------------------------------- probes
def meminfo_probe() -> Probe:
    return Probe(tuple(MEMINFO_ARGV), checked("reading /proc/meminfo", parse_meminfo))


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
    """GPUs via nvidia-smi (the parsers above); None when the node has no nvidia-smi.
    Add MemAvailable with `report.with_meminfo(...)` from meminfo_probe."""
    return Probe(tuple(sh_argv(GPUS_SCRIPT, *QUERY_ARGV[1:])), _parse_gpus)
