"""Benchmark `sparkctl preflight` on a 2-node and an 8-node testbed, measured in the same run.

    python bench/preflight.py [--runs 5]   (root, repo root)

Brings up a 2-node lab, then an 8-node lab (one at a time), each with the stand-in engine image
and weights on every node, a mode spanning all nodes (so every fabric pair is pinged both ways)
and transport roce on fixture sysfs trees. Times a full preflight (fresh connections, all
checks) `--runs` times per lab and prints the medians and their ratio (target: 8 nodes within
1.5x of 2 nodes: the nodes are checked in parallel over one connection each). Also counts, in
every node's sshd log, the controller's logins and remote commands per run: per node they stay
the same from 2 nodes (1 fabric pair) to 8 (28 pairs), since each node pings its peers from its
own probe batch (the Docker API adds its own `dial-stdio` commands). Also prints how busy
the machine's CPUs were: every testbed node shares them, so a ratio measured while they are
saturated reflects the testbed's cores, not sparkctl's fan-out (real nodes bring their own CPUs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

import yaml  # noqa: E402
from tests.fixtures.sysfs.build import build_tree  # noqa: E402
from tests.testbed.lab import NODE_MOUNT, Lab  # noqa: E402
from tests.testbed.profiles import lab_profile, seed_weights  # noqa: E402

from sparkctl.connectors import NodePool  # noqa: E402
from sparkctl.planning.build import build_plan  # noqa: E402
from sparkctl.preflight import run_preflight  # noqa: E402
from sparkctl.profile import load_profile_file  # noqa: E402


def _prepare(lab: Lab, path: Path) -> Path:
    seed_weights(lab)
    for n in lab.nodes:
        build_tree(Path(n.node_root, "sys"), {n.fabric_netdev: n.fabric_ip})
    names = [n.name for n in lab.nodes]
    modes = {"all": {"nodes": names, "tp": len(names), "default": True}}
    path.write_text(yaml.safe_dump(lab_profile(lab, modes=modes, transport="roce"), sort_keys=False))
    return path


def _cpu_busy_seconds() -> float:
    """Busy CPU time of the whole machine so far (all nodes' sshd/dockerd/probes + this process)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _controller_ssh(lab: Lab) -> tuple[int, int]:
    """(logins, remote commands) from the controller so far, summed over the lab's sshd logs."""
    logins = commands = 0
    src = f" for root from {lab.mgmt_host_ip} port "
    for n in lab.nodes:
        log = Path(n.data_dir, "sshd.log").read_text(errors="replace")
        logins += log.count(f"Accepted publickey{src}")
        commands += log.count(f"Starting session: command{src}")
    return logins, commands


def measure(nodes: int, runs: int) -> tuple[float, list[float], int, float, tuple[float, float]]:
    with Lab(nodes=nodes) as lab:
        lab.install_engine_image()
        profile = load_profile_file(_prepare(lab, Path(f"/tmp/bench-preflight-{lab.id}.yaml")))
        plan = build_plan(profile, "all")
        times, findings, busy = [], 0, []
        for i in range(runs + 1):  # the first run warms caches (page cache, docker CLI binary)
            if i == 1:
                ssh0 = _controller_ssh(lab)
            cpu0, start = _cpu_busy_seconds(), time.perf_counter()
            with NodePool(profile) as pool:
                report = run_preflight(profile, plan, pool, sysfs_root=f"{NODE_MOUNT}/sys")
            times.append(time.perf_counter() - start)
            busy.append((_cpu_busy_seconds() - cpu0) / (times[-1] * (os.cpu_count() or 1)))
            findings = len(report.findings)
            if not report.ok:
                raise SystemExit(f"{nodes}-node lab is not healthy: {[f.message for f in report.errors]}")
        ssh1 = _controller_ssh(lab)
        per_node = tuple((b - a) / runs / nodes for a, b in zip(ssh0, ssh1, strict=True))
        return statistics.median(times[1:]), times[1:], findings, statistics.median(busy[1:]), per_node  # type: ignore[return-value]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    results = {}
    for n in (2, 8):
        med, times, findings, busy, (logins, commands) = measure(n, args.runs)
        results[n] = med
        print(
            f"{n} nodes: median {med:.3f}s over {len(times)} runs ({', '.join(f'{t:.2f}' for t in times)}); "
            f"{findings} findings; machine CPU busy {busy:.0%} of {os.cpu_count()} cores; "
            f"controller per node per run: {logins:g} SSH login(s), {commands:g} remote command(s) "
            f"for {n - 1} peer(s) ({n * (n - 1) // 2} fabric pairs)",
            flush=True,
        )
    ratio = results[8] / results[2]
    print(f"ratio 8/2 nodes: {ratio:.2f}x (target <= 1.5x) -> {'PASS' if ratio <= 1.5 else 'MISS'}")


if __name__ == "__main__":
    main()
