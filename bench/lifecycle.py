"""Benchmark how fast `sparkctl up` notices readiness and failure, against the reference recipe's loop.

    python bench/lifecycle.py [--rounds 3] [--ref-interval 5]   (root, repo root)

Brings up its own 2-node lab with the stand-in engine and measures, in the same run:
  (a) time from the engine becoming ready (Docker's timestamp of rank 0's "fired up and ready"
      log line) to `up` returning;                                                 target <= 1 s
  (b) time from a rank dying (Docker's FinishedAt of rank 1) to `up` exiting, rollback included;
                                                                                   target <= 5 s
next to the reference recipe's approach: a shell loop on rank 0's node that polls rank 0's
`/v1/models` with curl every --ref-interval seconds and stops when rank 0's container is gone
(it never looks at rank 1). Both start the very same containers (the same plan, the same Docker
create request); only the waiting differs. Failure cases:
  b1: rank 1 dies while loading (after rendezvous): the stand-in's rank 0 then exits as well;
  b2: rank 1 dies at start-up (before rendezvous): rank 0 keeps waiting for its peer until the
      rendezvous timeout (set to --rendezvous-timeout here; real torch/NCCL waits far longer).
Times are medians of --rounds runs (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.testbed.lab import Lab  # noqa: E402
from tests.testbed.profiles import seed_weights, write_lab_profile  # noqa: E402

from sparkctl.connectors import NodePool  # noqa: E402
from sparkctl.lifecycle import containers  # noqa: E402
from sparkctl.lifecycle.containers import parse_docker_time  # noqa: E402
from sparkctl.lifecycle.down import down  # noqa: E402
from sparkctl.lifecycle.up import up  # noqa: E402
from sparkctl.lifecycle.watch import RankFailedError  # noqa: E402
from sparkctl.plan import build_plan  # noqa: E402
from sparkctl.profile import load_profile_file  # noqa: E402

READY_LINE = "The server is fired up and ready to roll!"

# The recipe's wait, as its shell script does it: rank 0's /v1/models only, and rank 0's container.
REFERENCE_LOOP = r"""
while :; do
  if curl -sf -o /dev/null "http://127.0.0.1:$PORT/v1/models"; then exit 0; fi
  if [ -z "$(docker ps -q -f "name=^$NAME\$")" ]; then docker logs --tail 40 "$NAME" >/dev/null 2>&1; exit 1; fi
  sleep "$INTERVAL"
done
"""


def ready_time(lab: Lab, node: str, name: str) -> float:
    raw = lab.docker(node).api.logs(name, timestamps=True).decode(errors="replace")
    for line in raw.splitlines():
        if READY_LINE in line:
            return parse_docker_time(line.split(" ", 1)[0]).timestamp()
    raise SystemExit(f"{name}: no ready line in its log")


def finished_time(lab: Lab, node: str, name: str) -> float:
    attrs = lab.docker(node).api.inspect_container(name)
    return parse_docker_time(attrs["State"]["FinishedAt"]).timestamp()


def clear(lab: Lab, cluster: str) -> None:
    for n in lab.nodes:
        for c in lab.docker(n).containers.list(all=True, filters={"label": f"sparkctl.cluster={cluster}"}):
            c.remove(force=True)


def sparkctl_ready(profile, pool, lab) -> float:
    up(profile, pool, mode="tp2", skip_preflight=True)
    returned = time.time()
    return returned - ready_time(lab, "spark1", build_plan(profile, "tp2").rank(0).container_name)


def sparkctl_failure(profile, pool, lab) -> float:
    try:
        up(profile, pool, mode="tp2", skip_preflight=True)
    except RankFailedError:
        exited = time.time()
    else:
        raise SystemExit("up succeeded although rank 1 was told to fail")
    # The containers are rolled back; rank 1's death time comes from the event stream's record.
    return exited - _last_death[0]


_last_death: list[float] = [0.0]


def reference(profile, pool, lab, interval: float, expect_ready: bool) -> tuple[float, bool]:
    """Start the plan's containers (rank 1, then rank 0) and wait the recipe's way; returns (wait end, ok)."""
    plan = build_plan(profile, "tp2")
    for spec in [*plan.ranks[1:], plan.ranks[0]]:
        containers.start_rank(pool.get(spec.node), spec)
    env = [f"PORT={plan.endpoint.port}", f"NAME={plan.rank(0).container_name}", f"INTERVAL={interval}",
           f"DOCKER_HOST={lab.node('spark1').docker_host}"]  # fmt: skip
    proc = lab.exec("spark1", ["env", *env, "sh", "-c", REFERENCE_LOOP], check=False, timeout=900)
    return time.time(), proc.returncode == 0


def watch_deaths(lab: Lab, cluster: str) -> None:
    """Record rank 1's FinishedAt from Docker events (the container is removed by the rollback)."""
    import threading

    def run() -> None:
        for ev in lab.docker("spark2").events(
            decode=True, filters={"event": "die", "label": f"sparkctl.cluster={cluster}"}
        ):
            _last_death[0] = ev["timeNano"] / 1e9

    threading.Thread(target=run, daemon=True).start()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ref-interval", type=float, default=5.0, help="the reference loop's sleep (s)")
    ap.add_argument("--delay-load", type=float, default=3.0, help="stand-in load time (s)")
    ap.add_argument("--rendezvous-timeout", type=float, default=30.0)
    args = ap.parse_args()

    state = tempfile.mkdtemp(prefix="sparkctl-bench-")
    os.environ["XDG_STATE_HOME"] = state
    with Lab(nodes=2) as lab:
        lab.install_engine_image()
        seed_weights(lab)
        base = {"STANDIN_DELAY_LOAD": str(args.delay_load)}
        modes = {
            "ok": {"solo": {"nodes": ["spark1"], "tp": 1, "default": True},
                   "tp2": {"nodes": ["spark1", "spark2"], "tp": 2, "env": base}},
            "b1": {"solo": {"nodes": ["spark1"], "tp": 1, "default": True},
                   "tp2": {"nodes": ["spark1", "spark2"], "tp": 2, "env": {**base, "STANDIN_FAIL_AT": "1:load"}}},
            "b2": {"solo": {"nodes": ["spark1"], "tp": 1, "default": True},
                   "tp2": {"nodes": ["spark1", "spark2"], "tp": 2,
                           "env": {**base, "STANDIN_FAIL_AT": "1:start",
                                   "STANDIN_RENDEZVOUS_TIMEOUT": str(args.rendezvous_timeout)}}},
        }  # fmt: skip
        profiles = {}
        for key, m in modes.items():
            path = write_lab_profile(lab, Path(state) / f"{key}.yaml", modes=m, engine={"ready_timeout": 300})
            profiles[key] = load_profile_file(path)
        cluster = profiles["ok"].cluster
        watch_deaths(lab, cluster)
        results: dict[str, list[float]] = {k: [] for k in ("a", "a_ref", "b1", "b1_ref", "b2", "b2_ref")}
        with NodePool(profiles["ok"]) as pool:
            for i in range(args.rounds):
                print(f"round {i + 1}/{args.rounds}", flush=True)
                results["a"].append(sparkctl_ready(profiles["ok"], pool, lab))
                down(profiles["ok"], pool)
                end, ok = reference(profiles["ok"], pool, lab, args.ref_interval, True)
                plan = build_plan(profiles["ok"], "tp2")
                results["a_ref"].append(end - ready_time(lab, "spark1", plan.rank(0).container_name))
                clear(lab, cluster)

                results["b1"].append(sparkctl_failure(profiles["b1"], pool, lab))
                end, ok = reference(profiles["b1"], pool, lab, args.ref_interval, False)
                results["b1_ref"].append(end - finished_time(lab, "spark2", plan.rank(1).container_name))
                clear(lab, cluster)

                if i == 0:  # b2's reference waits out the rendezvous timeout: once is enough
                    results["b2"].append(sparkctl_failure(profiles["b2"], pool, lab))
                    end, ok = reference(profiles["b2"], pool, lab, args.ref_interval, False)
                    results["b2_ref"].append(end - finished_time(lab, "spark2", plan.rank(1).container_name))
                    clear(lab, cluster)

    med = {k: statistics.median(v) for k, v in results.items() if v}
    print()
    print(f"reference = poll rank 0's /v1/models every {args.ref_interval:g}s, watch rank 0's container only")
    print(f"{'measure':58} {'sparkctl':>9} {'reference':>10}  target")
    print(f"{'(a) engine ready -> up returns (s)':58} {med['a']:9.2f} {med['a_ref']:10.2f}  <= 1 s")
    print(
        f"{'(b1) rank 1 dies while loading -> up exits (s)':58} {med['b1']:9.2f} {med['b1_ref']:10.2f}  <= 5 s"
    )
    print(
        f"{'(b2) rank 1 dies before rendezvous -> up exits (s)':58} {med['b2']:9.2f} {med['b2_ref']:10.2f}  <= 5 s"
    )
    if med["a_ref"] < 0:
        print(f"note: the reference declared 'ready' {-med['a_ref']:.2f}s BEFORE the engine was "
              "(/v1/models answers during warm-up; sparkctl also requires /health)")  # fmt: skip
    ok = med["a"] <= 1.0 and med["b1"] <= 5.0 and med["b2"] <= 5.0
    print("targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
