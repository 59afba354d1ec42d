"""Failed requests and time of a `switch` between two configs of `dp2` under client load: the
plain stop-all/start-all switch (`--no-rolling`, the baseline) vs the rolling switch, on a real
2-node lab (stand-in replicas, the real sglang-router, the real CLI).

    python bench/rolling.py [--rounds 3] [--threads 8] [--gen-delay 2] [--delay-load 2] [--sigterm exit|ignore]
                                                                              (root, repo root)

Each round switches dp2 -> dp2b with --no-rolling, then dp2b -> dp2 rolling: both replace the
same two replicas between the same two configs. A LoadGen (N client threads streaming chat requests
through the router) runs across every switch; it counts answers and failed requests (HTTP
error, connection error, timeout) and the window from the first to the last failure. The
clients retry at once, so the baseline's failed count grows with how fast the router answers
503 while it has no replica; the window is the outage.
STANDIN_DELAY_LOAD makes a replica take --delay-load s to come up, as a model load does.
--sigterm ignore: replicas that ignore SIGTERM (an engine stuck in a CUDA call), so every stop
waits the profile's engine.stop_grace (5 s) before SIGKILL; the rolling switch drains each replica
out of the router first, so it should still fail nothing, only take longer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.testbed.lab import Lab  # noqa: E402
from tests.testbed.loadgen import LoadGen  # noqa: E402
from tests.testbed.profiles import seed_weights, write_rolling_profile  # noqa: E402

from _cli import cli, must  # noqa: E402
from sparkctl.planning.build import build_plan  # noqa: E402
from sparkctl.profile import load_profile_file  # noqa: E402


def switch_under_load(state: str, profile: Path, url: str, mode: str, rolling: bool, threads: int) -> dict:
    flag = "--rolling" if rolling else "--no-rolling"
    with LoadGen(url, model="tiny-test", threads=threads, timeout=60, stream=True) as load:
        load.wait_for(8)
        before = load.stats.ok
        took, proc = cli(state, profile, "switch", mode, flag, "--skip-preflight", "--json")
        must(proc, f"switch {mode} {flag}")
        load.wait_for(8, timeout=120)  # served again after the switch
    stats = load.stats
    out = json.loads(proc.stdout)
    action = out["action"]
    for r in out.get("rolling", []):  # where a rolling switch spends its time
        print(
            f"    replica {r['index']}: {r['in_flight']} in flight, drained {r['drain_s']:.1f}s, "
            f"stopped {r['stop_s']:.1f}s, ready {r['start_s']:.1f}s, total {r['total_s']:.1f}s",
            flush=True,
        )
    window = stats.failed_at[-1] - stats.failed_at[0] if stats.failed_at else 0.0
    print(
        f"  switch {mode} {flag}: {action} in {took:.1f}s, {stats.line()}, failures over {window:.1f}s "
        f"(slowest failed request {stats.slowest_failure:.1f}s)",
        flush=True,
    )
    slowest = stats.slowest_failure
    return {
        "s": took,
        "failed": stats.failed,
        "ok": stats.ok - before,
        "window": window,
        "slowest": slowest,
        "action": action,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=8, help="client threads of the load (streaming)")
    ap.add_argument("--gen-delay", type=float, default=2.0, help="seconds per request (stand-in)")
    ap.add_argument("--delay-load", type=float, default=2.0, help="seconds a replica takes to load")
    ap.add_argument(
        "--sigterm",
        choices=("exit", "ignore"),
        default="exit",
        help="ignore: replicas that never stop on SIGTERM (each stop waits engine.stop_grace, 5 s here)",
    )
    args = ap.parse_args()

    state = tempfile.mkdtemp(prefix="sparkctl-bench-")
    runs: dict[str, list[dict]] = {"baseline": [], "rolling": []}
    with Lab(nodes=2) as lab:
        lab.install_engine_image()
        seed_weights(lab)
        profile = write_rolling_profile(
            lab,
            Path(state) / "sparkctl.yaml",
            args.gen_delay,
            policy="cache_aware",  # the profile default
            STANDIN_DELAY_LOAD=str(args.delay_load),
            STANDIN_SIGTERM=args.sigterm,
        )
        url = build_plan(load_profile_file(profile), "dp2").endpoint.url
        must(cli(state, profile, "up", "dp2", "--skip-preflight")[1], "up dp2")
        for i in range(args.rounds):  # dp2 -> dp2b stop-all/start-all, then dp2b -> dp2 rolling
            print(f"round {i + 1}/{args.rounds}", flush=True)
            runs["baseline"].append(switch_under_load(state, profile, url, "dp2b", False, args.threads))
            runs["rolling"].append(switch_under_load(state, profile, url, "dp2", True, args.threads))
        must(cli(state, profile, "down")[1], "down")
    assert all(r["action"] == "rolled" for r in runs["rolling"]), runs["rolling"]
    assert all(r["action"] == "started" for r in runs["baseline"]), runs["baseline"]
    report(runs, args)
    return 0


def report(runs: dict[str, list[dict]], args: argparse.Namespace) -> None:
    def med(kind: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[kind])

    def total(kind: str, key: str) -> int:
        return sum(r[key] for r in runs[kind])

    print(
        f"\nswitch between two dp2 configs under load ({args.threads} clients, {args.gen_delay}s per request, "
        f"replica load {args.delay_load}s, SIGTERM: {args.sigterm}), {args.rounds} round(s); medians, failed = sum over rounds:"
    )
    print(f"{'':<22}{'failed':>8}{'answered':>10}{'fail window s':>15}{'slowest fail s':>16}{'switch s':>10}")
    for kind, name in (("baseline", "stop-all/start-all"), ("rolling", "rolling")):
        print(
            f"{name:<22}{total(kind, 'failed'):>8}{total(kind, 'ok'):>10}"
            f"{med(kind, 'window'):>15.1f}{med(kind, 'slowest'):>16.1f}{med(kind, 's'):>10.1f}"
        )
    base_failed, roll_failed = total("baseline", "failed"), total("rolling", "failed")
    share = roll_failed / base_failed if base_failed else float("nan")
    print(
        f"failed requests, rolling / baseline: {roll_failed}/{base_failed} = {share:.3f} "
        f"(target: 0 failed with rolling: {'met' if roll_failed == 0 else 'NOT met'})"
    )
    print(f"switch time, rolling / baseline: {med('rolling', 's') / med('baseline', 's'):.2f}x")


if __name__ == "__main__":
    sys.exit(main())
