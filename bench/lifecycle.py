"""Benchmark fail-fast, stop-fast and heal on a real 2-node lab, with both stand-in engines.

    python bench/lifecycle.py [--rounds 3] [--grace 5]   (root, repo root)

Engines: `handler` (the stand-in exits on SIGTERM) and `deaf` (it ignores SIGTERM: SIG_IGN, as an
engine that never stops on it). Measured through the real CLI (`python -m sparkctl ...`), medians
of --rounds runs (the machine is shared), each against its target and a baseline measured in the
same run:

  (1) rank 1 dies while loading -> `up` exits (Docker's `die` time of rank 1 -> CLI exit);
      target <= 3 s; the output must name rank 1 and show its log tail, and nothing may be left;
  (2) `down` of the TP=2 group (CLI wall time); target <= grace + 2 s; baseline: the recipe's
      `docker stop` of the same two containers created the recipe's way (`docker run`: no init,
      Docker's default 10 s stop timeout), both nodes in parallel; (2') the same minus the
      floor of `down` with nothing to stop (CLI start, SSH to both nodes, listing), which on a
      loaded machine is most of it;
  (3) `switch solo` from tp2 (CLI wall time); target <= `down` + `up solo` measured in this run;
  (4) supervised group restart: rank 1 killed after ready -> a generation succeeds again;
      target <= the group's start time (`up tp2`, this run) + 3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.testbed.lab import Lab  # noqa: E402
from tests.testbed.profiles import seed_weights, write_lab_profile  # noqa: E402
from tests.testbed.routerlab import wait_for  # noqa: E402

from _cli import cli, must  # noqa: E402
from sparkctl.connectors import NodePool  # noqa: E402
from sparkctl.planning.build import build_plan  # noqa: E402
from sparkctl.profile import load_profile_file  # noqa: E402
from sparkctl.runtime.containers import create_params, revealed_env  # noqa: E402

ENGINES = {"handler": "exit", "deaf": "ignore"}


def leftovers(lab: Lab, cluster: str) -> int:
    return sum(
        len(
            lab.docker(n).containers.list(
                all=True, sparse=True, filters={"label": f"sparkctl.cluster={cluster}"}
            )
        )
        for n in lab.nodes
    )


class Deaths:
    """Docker `die` times (wall clock) of the cluster's containers on spark2, from its event stream."""

    def __init__(self, lab: Lab, cluster: str) -> None:
        self.times: list[float] = []
        events = lab.docker("spark2").events(
            decode=True, filters={"event": "die", "label": f"sparkctl.cluster={cluster}"}
        )
        threading.Thread(
            target=lambda: [self.times.append(ev["timeNano"] / 1e9) for ev in events], daemon=True
        ).start()


def fail_fast(state: str, lab: Lab, profile: Path, deaths: Deaths, cluster: str) -> float:
    seen = len(deaths.times)
    env = {**os.environ, "XDG_STATE_HOME": state, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "-m", "sparkctl", "up", "tp2", "--skip-preflight", "-p", str(profile)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    exited = time.time()
    flat = " ".join(proc.stderr.split())
    if proc.returncode != 3 or "rank 1 exited" not in flat or "--- rank 1 on spark2" not in proc.stderr:
        raise SystemExit(f"up did not fail naming rank 1 with its log:\n{proc.stderr}")
    if "injected failure at phase load" not in proc.stderr or leftovers(lab, cluster):
        raise SystemExit(f"no log tail, or containers left behind:\n{proc.stderr}")
    for _ in range(50):  # the event may arrive a moment after the CLI returned
        if len(deaths.times) > seen:
            break
        time.sleep(0.05)
    return exited - deaths.times[seen]


def recipe_down(lab: Lab, profile: Path) -> float:
    """The recipe's way: `docker run` (no init) both ranks, then `docker stop` both (default 10 s)."""
    prof = load_profile_file(profile)
    plan = build_plan(prof, "tp2")
    with NodePool(prof) as pool:
        for spec in [*plan.ranks[1:], plan.ranks[0]]:
            params = {**create_params(spec, revealed_env(spec)), "init": False}
            pool.get(spec.node).docker().containers.create(**params).start()
    time.sleep(2)  # both engines up (the rendezvous done); not part of the measure
    t0 = time.monotonic()
    threads = [
        threading.Thread(
            target=lab.exec,
            args=(s.node, ["docker", "-H", lab.node(s.node).docker_host, "stop", s.container_name]),
        )
        for s in plan.ranks
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - t0
    for s in plan.ranks:
        lab.docker(s.node).containers.get(s.container_name).remove(force=True)
    return took


def generates(api_base: str, model: str) -> bool:
    body = json.dumps(
        {"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
    ).encode()
    req = urllib.request.Request(
        f"{api_base}/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return bool(json.loads(resp.read()).get("choices"))
    except OSError:
        return False


def supervised_restart(state: str, lab: Lab, profile: Path) -> tuple[float, float]:
    """(start time of the group, kill -> generating again) with `up --supervise`."""
    took, proc = cli(state, profile, "up", "tp2", "--skip-preflight", "--supervise", "--json")
    must(proc, "up --supervise")
    start_s = json.loads(proc.stdout)["elapsed_s"]
    plan = build_plan(load_profile_file(profile), "tp2")
    old = lab.docker("spark2").containers.get(plan.rank(1).container_name).id
    t0 = time.monotonic()
    lab.kill_container("spark2", plan.rank(1).container_name)

    def serving_again() -> bool:
        try:
            new = lab.docker("spark2").containers.get(plan.rank(1).container_name).id
        except Exception:  # noqa: BLE001 - removed and not yet created again
            return False
        return new != old and generates(plan.endpoint.api_base, plan.endpoint.served_model_name)

    wait_for("the supervised group to serve again", serving_again, timeout=300, interval=0.05)
    return start_s, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--grace", type=int, default=5, help="engine.stop_grace (s)")
    ap.add_argument("--delay-load", type=float, default=2.0, help="stand-in load time (s)")
    args = ap.parse_args()

    state = tempfile.mkdtemp(prefix="sparkctl-bench-")
    med: dict[str, float] = {}
    with Lab(nodes=2) as lab:
        lab.install_engine_image()
        seed_weights(lab)
        res: dict[str, list[float]] = {}
        for engine, sigterm in ENGINES.items():
            env = {"STANDIN_DELAY_LOAD": str(args.delay_load), "STANDIN_SIGTERM": sigterm}
            modes = {
                "solo": {"nodes": ["spark1"], "tp": 1, "default": True, "env": env},
                "tp2": {"nodes": ["spark1", "spark2"], "tp": 2, "env": env},
            }
            fail = {**modes, "tp2": {**modes["tp2"], "env": {**env, "STANDIN_FAIL_AT": "1:load"}}}
            eng = {"ready_timeout": 300, "stop_grace": args.grace}
            ok = write_lab_profile(lab, Path(state) / f"{engine}.yaml", modes=modes, engine=eng)
            bad = write_lab_profile(lab, Path(state) / f"{engine}-fail.yaml", modes=fail, engine=eng)
            cluster = load_profile_file(ok).cluster
            deaths = Deaths(lab, cluster)
            for i in range(args.rounds):
                print(f"{engine}: round {i + 1}/{args.rounds}", flush=True)
                res.setdefault(f"fail_{engine}", []).append(fail_fast(state, lab, bad, deaths, cluster))
                must(cli(state, ok, "up", "tp2", "--skip-preflight")[1], "up tp2")
                took, proc = cli(state, ok, "down")
                must(proc, "down")
                res.setdefault(f"down_{engine}", []).append(took)
                took, proc = cli(state, ok, "down")  # nothing left: the floor (CLI start, SSH, listing)
                must(proc, "down (nothing running)")
                res.setdefault(f"floor_{engine}", []).append(took)
                res.setdefault(f"recipe_down_{engine}", []).append(recipe_down(lab, ok))
                took, proc = cli(state, ok, "up", "solo", "--skip-preflight")
                must(proc, "up solo")
                res.setdefault(f"up_solo_{engine}", []).append(took)
                must(cli(state, ok, "up", "tp2", "--skip-preflight")[1], "up tp2")
                took, proc = cli(state, ok, "switch", "solo", "--skip-preflight")
                must(proc, "switch solo")
                res.setdefault(f"switch_{engine}", []).append(took)
                must(cli(state, ok, "down")[1], "down")
            start_s, back = supervised_restart(state, lab, ok)
            res.setdefault(f"start_{engine}", []).append(start_s)
            res.setdefault(f"heal_{engine}", []).append(back)
            must(cli(state, ok, "down")[1], "down")
        med = {k: statistics.median(v) for k, v in res.items()}

    g = args.grace
    rows = []
    for e in ENGINES:
        down_up = med[f"down_{e}"] + med[f"up_solo_{e}"]
        rows += [
            (f"(1) rank 1 dies while loading -> up exits [{e}]", med[f"fail_{e}"], 3.0, "-", None),
            (
                f"(2) down, TP=2 [{e}]",
                med[f"down_{e}"],
                g + 2.0,
                "recipe docker stop",
                med[f"recipe_down_{e}"],
            ),
            (
                f"(2') down minus its floor [{e}]",
                med[f"down_{e}"] - med[f"floor_{e}"],
                g + 2.0,
                "floor: down of none",
                med[f"floor_{e}"],
            ),
            (f"(3) switch solo from tp2 [{e}]", med[f"switch_{e}"], down_up, "down + up solo", down_up),
            (
                f"(4) rank 1 killed -> serving again [{e}]",
                med[f"heal_{e}"],
                med[f"start_{e}"] + 3.0,
                "start time",
                med[f"start_{e}"],
            ),
        ]
    load = os.getloadavg()[0]
    print(
        f"\nmedians of {args.rounds} round(s), engine.stop_grace = {g}s (supervised restart: 1 round); "
        f"load average {load:.1f} on {os.cpu_count()} CPUs"
    )
    print(f"{'measure':48} {'s':>6} {'target':>7} {'/target':>8}  {'baseline':>18} {'s':>6} {'ratio':>6}")
    ok_all = True
    for name, value, target, base_name, base in rows:
        ok_all &= value <= target
        ratio = f"{value / base:6.2f}" if base else "     -"
        base_s = f"{base:6.2f}" if base else "     -"
        print(f"{name:48} {value:6.2f} {target:7.2f} {value / target:8.2f}  {base_name:>18} {base_s} {ratio}")
    print("targets met" if ok_all else "TARGETS MISSED")
    return 0 if ok_all else 1


if __name__ == "__main__":
    raise SystemExit(main())
