"""Turn the fabric workers' output into a report and a verdict (pure: text in, data out).

Each rank's output is the worker's JSON event lines mixed with NCCL_DEBUG lines. The verdict
judges one collective's peak bus bandwidth against the profile threshold (NCCL only; gloo runs
are reported, never judged), flags torch/NCCL drift between ranks and a stray nccl.conf, and
turns a failure or a hang into an error that names the phase, the likely causes and the NCCL
lines that point at them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from sparkctl.findings import Finding, Severity, version_drift, worst

# Published pass mark for two DGX Sparks cabled directly (nccl-tests all_gather bus bandwidth).
DEFAULT_THRESHOLD_GBPS = 21.875
JUDGED_OP = "all_gather"

# "host:pid:tid [dev] NCCL INFO ..." / "NCCL WARN ..." as NCCL_DEBUG prints them.
_VIA = re.compile(r"\bvia ((?:NET/)?[A-Za-z0-9]+(?:/[A-Za-z]+)?)")
_NCCL_LINE = re.compile(r"\bNCCL (INFO|WARN|ERROR|TRACE)\b")
# INFO lines worth quoting: which transport and devices NCCL chose, and its own complaints.
_NCCL_TELLING = re.compile(
    r"NCCL (WARN|ERROR)|NET/|Using network|NCCL_IB_HCA|NCCL_SOCKET_IFNAME|IB_HCA|Bootstrap|"
    r"nccl\.conf|MTU|via |comm .* rank|Init COMPLETE|version",
    re.IGNORECASE,
)

_FABRIC_CAUSES = [
    "MTU mismatch on the fabric (a jumbo-frame side talking to a 1500 side): "
    "check `ping -M do -s <MTU-28>` both ways",
    "wrong or partial NCCL_IB_HCA (HCA names/ports that are down or not on the fabric IP)",
    "a stray /etc/nccl.conf (or ~/.nccl.conf) in the image overriding the environment",
    "NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME naming an interface the peer cannot reach",
    "torch/NCCL version drift between the images on the nodes",
]
_CAUSES = {
    "start": ["the container did not start the worker (image lacks python3 or torch?)"],
    "setup": [
        "the image's torch cannot use the GPU (CPU-only build, or the container was started without GPUs)",
        "the GPU index does not exist on this node",
    ],
    "rendezvous": [
        "rank 0 is not listening or not reachable at the dist-init address (wrong IP, port taken, firewall)",
        "GLOO_SOCKET_IFNAME names an interface that is missing or not on the fabric",
        "the ranks were given different world sizes or the same rank",
    ],
    "warmup": _FABRIC_CAUSES,
    "measure": _FABRIC_CAUSES,
}
# Error texts that name their cause exactly: (pattern, cause template using the match).
_KNOWN_ERRORS = [
    (
        re.compile(r"No module named '([\w.]+)'"),
        "the image's python cannot import '{0}': the serving image must carry torch (and its dependencies)",
    ),
    (
        re.compile(r"Unable to find address for:?\s*(\S+)"),
        "interface '{0}' (GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME) does not exist or has no address "
        "on this node: set fabric.netdevs to the node's fabric netdev (`ip -br addr`)",
    ),
    (
        re.compile(r"no socket interface found", re.IGNORECASE),
        "NCCL_SOCKET_IFNAME matches no interface on this node: fix fabric.netdevs",
    ),
    (
        re.compile(r"ibv_modify_qp.*\b110\b|NET/IB : No device found", re.IGNORECASE),
        "NCCL_IB_HCA names HCAs/ports that are down or not paired with the peer's: "
        "derive them from sysfs (fabric.hcas: auto)",
    ),
    (
        re.compile(
            r"Connection refused|connect\(\) timed out|Timed out .*TCPStore|DistStoreError", re.IGNORECASE
        ),
        "rank 0's rendezvous at the dist-init address was unreachable: check the rank-0 fabric IP, "
        "routes and firewall between the nodes",
    ),
]


def known_causes(texts: list[str]) -> list[str]:
    found: list[str] = []
    for rx, template in _KNOWN_ERRORS:
        for text in texts:
            m = rx.search(text)
            if m:
                cause = template.format(*m.groups())
                if cause not in found:
                    found.append(cause)
                break
    return found


@dataclass
class RankOutput:
    rank: int
    node: str | None = None
    start: dict | None = None
    phases: dict[str, float] = field(default_factory=dict)
    results: list[dict] = field(default_factory=list)
    error: dict | None = None
    done: bool = False
    nccl_lines: list[str] = field(default_factory=list)
    other_lines: list[str] = field(default_factory=list)
    exit_code: int | None = None
    timed_out: bool = False

    @property
    def phase_reached(self) -> str:
        """The phase the rank was in when it stopped: start, rendezvous, warmup, measure, done."""
        if self.done:
            return "done"
        if self.error:
            return str(self.error.get("phase", "start"))
        if self.results or "warmup" in self.phases:
            return "measure"
        if "rendezvous" in self.phases:
            return "warmup"
        return "rendezvous" if self.start else "start"

    @property
    def transports(self) -> list[str]:
        """Transports NCCL connected its channels over (P2P/IPC, SHM, NET/IB, NET/Socket...)."""
        return sorted({m.group(1) for ln in self.nccl_lines for m in [_VIA.search(ln)] if m})

    @property
    def versions(self) -> dict:
        return (self.start or {}).get("versions", {})


def parse_rank_output(text: str, rank: int, node: str | None = None) -> RankOutput:
    out = RankOutput(rank=rank, node=node)
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith('{"event":'):
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                out.other_lines.append(line)
                continue
            kind = ev.get("event")
            if kind == "start":
                out.start = ev
            elif kind == "phase":
                out.phases[ev["phase"]] = float(ev.get("seconds", 0.0))
            elif kind == "result":
                out.results.append(ev)
            elif kind == "error":
                out.error = ev
            elif kind == "done":
                out.done = True
        elif _NCCL_LINE.search(line):
            out.nccl_lines.append(line)
        elif line:
            out.other_lines.append(line)
    return out


def telling_nccl_lines(ranks: list[RankOutput], limit: int = 30) -> list[str]:
    lines = [f"rank {r.rank}: {ln}" for r in ranks for ln in r.nccl_lines if _NCCL_TELLING.search(ln)]
    return lines[-limit:]


@dataclass
class FabricReport:
    backend: str
    ranks: list[RankOutput]
    rows: list[dict]  # one per (op, bytes): min busbw over ranks
    findings: list[Finding]
    judged_gbps: float | None
    threshold_gbps: float | None

    @property
    def severity(self) -> Severity:
        return worst(self.findings)

    def to_json(self) -> dict:
        return {
            "backend": self.backend,
            "severity": self.severity.value,
            "judged_op": JUDGED_OP,
            "judged_busbw_gbps": self.judged_gbps,
            "threshold_gbps": self.threshold_gbps,
            "rows": self.rows,
            "ranks": [
                {
                    "rank": r.rank,
                    "node": r.node,
                    "phase": r.phase_reached,
                    "versions": r.versions,
                    "exit_code": r.exit_code,
                    "timed_out": r.timed_out,
                }
                for r in self.ranks
            ],
            "findings": [f.to_json() for f in self.findings],
        }


def result_rows(ranks: list[RankOutput]) -> list[dict]:
    """Merge ranks' results per (op, size): the slowest rank's bandwidth is the fabric's."""
    merged: dict[tuple[str, int], dict] = {}
    for r in ranks:
        for res in r.results:
            key = (res["op"], int(res["bytes"]))
            row = merged.setdefault(
                key,
                {
                    "op": key[0],
                    "bytes": key[1],
                    "busbw_gbps": None,
                    "algbw_gbps": None,
                    "time_us": None,
                    "correct": True,
                },
            )
            for k, pick in (("busbw_gbps", min), ("algbw_gbps", min), ("time_us", max)):
                row[k] = res[k] if row[k] is None else pick(row[k], res[k])
            row["correct"] = row["correct"] and bool(res.get("correct", True))
    return [merged[k] for k in sorted(merged)]


def _rank_failures(failed: list[RankOutput]) -> list[Finding]:
    """One FabricRank error per rank that did not finish: how far it got and the likely causes."""
    findings: list[Finding] = []
    for r in failed:
        phase = r.phase_reached
        if r.timed_out:
            what = f"no progress past '{phase}' before the deadline (hang)"
        elif r.error:
            what = f"failed in '{phase}': {r.error.get('error')}"
        else:
            what = f"exited (code {r.exit_code}) in '{phase}' without a result"
        texts = [str((r.error or {}).get("error", "")), *r.nccl_lines, *r.other_lines]
        causes = known_causes(texts) or _CAUSES.get(phase, _FABRIC_CAUSES)
        findings.append(
            Finding(
                check="FabricRank",
                severity=Severity.ERROR,
                node=r.node,
                rank=r.rank,
                message=what,
                fix="likely causes: " + "; ".join(causes),
                data={"phase": phase, "nccl": telling_nccl_lines([r], 15), "tail": r.other_lines[-10:]},
            )
        )
    return findings


def _image_findings(ranks: list[RankOutput]) -> list[Finding]:
    """Version drift between the ranks' images, and an /etc/nccl.conf baked into one."""
    findings: list[Finding] = []
    for what, key, check in (
        ("torch", "torch", "TorchDrift"),
        ("NCCL", "nccl", "NcclDrift"),
        ("CUDA (torch build)", "cuda", "CudaDrift"),
    ):
        findings += version_drift({f"rank{r.rank}": r.versions.get(key) for r in ranks}, what, check)

    for r in ranks:
        conf = (r.start or {}).get("nccl_conf") or {}
        for path, body in conf.items():
            settings = [ln for ln in body.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
            if settings:
                findings.append(
                    Finding(
                        check="NcclConf",
                        severity=Severity.WARN,
                        node=r.node,
                        rank=r.rank,
                        message=f"{path} in the image sets {', '.join(settings)[:200]}",
                        fix=f"remove {path} from the image; sparkctl passes NCCL settings as environment",
                    )
                )
    return findings


def _bandwidth(
    rows: list[dict],
    ranks: list[RankOutput],
    backend: str,
    threshold_gbps: float | None,
    judged_op: str,
    failed: bool,
) -> tuple[list[Finding], float | None]:
    """FabricBandwidth: the judged op's peak bus bandwidth vs the threshold (NCCL only)."""
    findings: list[Finding] = []
    judged = [row["busbw_gbps"] for row in rows if row["op"] == judged_op]
    peak = max(judged) if judged else None
    transports = sorted({t for r in ranks for t in r.transports})
    via = f" over {', '.join(transports)}" if transports else ""
    if backend == "nccl" and threshold_gbps is not None and not failed and peak is not None:
        ok = peak >= threshold_gbps
        fix = (
            "about 3 GB/s means wrong HCAs or MTU; check NCCL_IB_HCA, MTU 9000 on both ends, and which "
            "transport the NCCL lines show (NET/IB vs NET/Socket)"
        )
        if "NET/Socket" in transports:
            fix = "NCCL fell back to TCP sockets (NET/Socket): no usable RDMA device; " + fix
        findings.append(
            Finding(
                check="FabricBandwidth",
                severity=Severity.OK if ok else Severity.ERROR,
                message=f"{judged_op} peak bus bandwidth {peak:.2f} GB/s{via} "
                f"({'>=' if ok else '<'} threshold {threshold_gbps:g} GB/s)",
                fix=None if ok else fix,
                data={"peak_gbps": peak, "transports": transports},
            )
        )
    elif not failed and peak is not None:
        findings.append(
            Finding(
                check="FabricBandwidth",
                severity=Severity.OK,
                message=f"{backend}: {judged_op} peak bus bandwidth {peak:.3f} GB/s (reported, not judged)",
                data={"peak_gbps": peak},
            )
        )
    return findings, peak


def build_report(
    ranks: list[RankOutput],
    backend: str,
    threshold_gbps: float | None = DEFAULT_THRESHOLD_GBPS,
    judged_op: str = JUDGED_OP,
) -> FabricReport:
    rows = result_rows(ranks)
    failed = [r for r in ranks if not r.done]
    findings = _rank_failures(failed)
    for row in rows:
        if not row["correct"]:
            findings.append(
                Finding(
                    check="FabricCorrect",
                    severity=Severity.ERROR,
                    message=f"{row['op']} of {row['bytes']} bytes gave wrong values",
                    fix="a rank computed on a broken device or NCCL build; rerun with NCCL_DEBUG=INFO",
                )
            )
    findings += _image_findings(ranks)
    found, peak = _bandwidth(rows, ranks, backend, threshold_gbps, judged_op, bool(failed))
    findings += found
    return FabricReport(
        backend=backend,
        ranks=ranks,
        rows=rows,
        findings=findings,
        judged_gbps=peak,
        threshold_gbps=threshold_gbps if backend == "nccl" else None,
    )
