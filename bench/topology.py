"""Benchmark `up` of N-node and replica layouts on a real 4-node lab (stand-in engines, the real
sglang-router from the serving image), through the real CLI, medians of --rounds runs.

    python bench/topology.py [--rounds 3] [--delay-load 2]   (root, repo root)

Each figure is printed with its target and the baseline it is measured against in the same run
(the machine is shared: absolute seconds say little):

  (1) `up tp4` from nothing vs `up tp2` (one group over 2 nodes): ranks start and are watched in
      parallel, so 4 nodes cost little more than 2; target ratio <= 1.5;
  (2) `up dp2` vs `up tp2`, and the router's share of it (from "starting the router" to ready, off
      the CLI's own timeline); target: dp2 <= tp2 + the router's share + 2 s;
  (3) `up tp2x2` vs `up dp2` (same router, groups of 2 nodes); target ratio <= 1.5;
  (4) a replica's head killed under `dp2` -> the router lists it unhealthy (polled every 0.1 s);
      target <= router.health_check_interval x (health_failure_threshold + 1) + 1 s;
  (5) `up dp2` again after that kill (ranks restarted, the router kept and given the replicas anew)
      vs `up dp2` from nothing (router started too); target ratio <= 1.0 + 0.2.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.testbed.lab import Lab  # noqa: E402
from tests.testbed.profiles import seed_weights, topology_modes, write_lab_profile  # noqa: E402
from tests.testbed.routerlab import wait_for  # noqa: E402

from _cli import cli as run_cli  # noqa: E402
from sparkctl.clients.router import RouterClient, RouterError  # noqa: E402
from sparkctl.planning.build import build_plan  # noqa: E402
from sparkctl.profile import load_profile_file  # noqa: E402

ROUTER = {"policy": "round_robin", "health_check_interval": 1, "health_failure_threshold": 2}
STAMP = re.compile(r"^\s*(\d+\.\d)s (.*)$")


def cli(state: str, profile: Path, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    return run_cli(state, profile, *args, check=True, env={"COLUMNS": "300"})


def router_share(output: str) -> float:
    """Seconds from the CLI's "starting the router" stamp to its "ready in" line."""
    start = next(float(m[1]) for line in output.splitlines() if (m := STAMP.match(line)) and "router" in m[2])
    ready = float(re.search(r"ready in (\d+\.\d)s", output)[1])  # type: ignore[index]
    return ready - start


def time_to_unhealthy(lab: Lab, prof, plan) -> float:
    client = RouterClient(plan.endpoint.url, timeout=2)
    dead = plan.rank(plan.groups[1].ranks[0])
    lab.kill_container(dead.node, dead.container_name)
    t0 = time.monotonic()

    def marked() -> bool:
        try:
            return any(w.url == plan.groups[1].worker_url and not w.healthy for w in client.workers())
        except RouterError:
            return False

    wait_for("the router to mark the killed replica unhealthy", marked, timeout=60)
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--delay-load", type=float, default=2.0, help="stand-in load time (s)")
    args = ap.parse_args()
    state = tempfile.mkdtemp(prefix="sparkctl-bench-")
    res: dict[str, list[float]] = {}
    with Lab(nodes=4) as lab:
        lab.install_engine_image()
        seed_weights(lab)
        env = {"STANDIN_DELAY_LOAD": str(args.delay_load)}
        modes = {"tp2": {"nodes": ["spark1", "spark2"], "tp": 2, "default": True}, **topology_modes()}
        modes = {name: {**m, "env": env} for name, m in modes.items()}
        path = write_lab_profile(lab, Path(state) / "p.yaml", modes=modes, router=ROUTER)
        prof = load_profile_file(path)
        dp2 = build_plan(prof, "dp2")
        for i in range(args.rounds):
            print(f"round {i + 1}/{args.rounds}", flush=True)
            for mode in ("tp2", "tp4", "dp2", "tp2x2"):
                cli(state, path, "down")
                took, proc = cli(state, path, "up", mode, "--skip-preflight")
                res.setdefault(f"up_{mode}", []).append(took)
                if mode in ("dp2", "tp2x2"):
                    res.setdefault(f"router_{mode}", []).append(router_share(proc.stdout + proc.stderr))
            cli(state, path, "up", "dp2", "--skip-preflight")
            res.setdefault("unhealthy", []).append(time_to_unhealthy(lab, prof, dp2))
            took, _ = cli(state, path, "up", "dp2", "--skip-preflight")
            res.setdefault("re_up_dp2", []).append(took)
        cli(state, path, "down")
    m = {k: statistics.median(v) for k, v in res.items()}
    r = prof.router
    rows = [
        ("up tp4 / up tp2", m["up_tp4"] / m["up_tp2"], 1.5, f"{m['up_tp4']:.1f}s / {m['up_tp2']:.1f}s"),
        (
            "up dp2 - (up tp2 + router share)",
            m["up_dp2"] - m["up_tp2"] - m["router_dp2"],
            2.0,
            f"{m['up_dp2']:.1f}s - ({m['up_tp2']:.1f}s + {m['router_dp2']:.1f}s)",
        ),
        ("up tp2x2 / up dp2", m["up_tp2x2"] / m["up_dp2"], 1.5, f"{m['up_tp2x2']:.1f}s / {m['up_dp2']:.1f}s"),
        (
            "killed replica -> unhealthy (s)",
            m["unhealthy"],
            r.health_check_interval * (r.health_failure_threshold + 1) + 1,
            f"router checks every {r.health_check_interval}s, {r.health_failure_threshold} failures",
        ),
        (
            "re-up dp2 (router kept) / up dp2",
            m["re_up_dp2"] / m["up_dp2"],
            1.2,
            f"{m['re_up_dp2']:.1f}s / {m['up_dp2']:.1f}s",
        ),
    ]
    print(f"\nmedians of {args.rounds} round(s); stand-in load {args.delay_load}s")
    ok = True
    for name, value, target, detail in rows:
        met = value <= target
        ok &= met
        print(f"  {name:36s} {value:6.2f}  target <= {target:.2f}  {'met' if met else 'MISSED'}  ({detail})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
