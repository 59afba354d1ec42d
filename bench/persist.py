"""Reboot to first token with `sparkctl persist`, next to a plain `up` of the same mode, in one run.

    python bench/persist.py [--rounds 3] [--delay-load 2]   (root, repo root)

On a real 2-node lab with the stand-in engine (its load time `--delay-load`), medians of
--rounds, each round measuring both:

  (1) plain: `sparkctl up tp2 --skip-preflight` from a clean cluster, CLI start -> the first
      token of a 1-token chat completion;
  (2) reboot: every rank killed, both nodes' dockerd restarted, the controller's state file
      removed; then the command of the controller's unit (`persist install`'s ExecStart and
      Environment, as systemd starts it) from its start -> the first token. The supervisor
      waits for the nodes, rebuilds the state from the labels and starts the group in order.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.testbed.lab import NODE_MOUNT, Lab  # noqa: E402
from tests.testbed.profiles import seed_weights, write_lab_profile  # noqa: E402

from _cli import cli, must  # noqa: E402
from sparkctl.planning.build import build_plan  # noqa: E402
from sparkctl.profile import load_profile_file  # noqa: E402


def first_token(api_base: str, model: str, deadline: float) -> float:
    """Monotonic time of the first successful 1-token generation (polled every 50 ms)."""
    body = json.dumps({"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
    while time.monotonic() < deadline:
        req = urllib.request.Request(
            f"{api_base}/chat/completions", data=body.encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                if json.loads(resp.read()).get("choices"):
                    return time.monotonic()
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit("no first token before the deadline")


def unit_command(unit: Path) -> tuple[list[str], dict[str, str]]:
    argv, env = [], {}
    for line in unit.read_text().splitlines():
        if line.startswith("ExecStart="):
            argv = shlex.split(line.removeprefix("ExecStart=").replace("$$", "$"))
        elif line.startswith("Environment="):
            key, _, value = shlex.split(line.removeprefix("Environment="))[0].partition("=")
            env[key] = value
    return argv, env


def plain_up(state: str, profile: Path, api: str, model: str) -> float:
    must(cli(state, profile, "down")[1], "down")
    t0 = time.monotonic()
    must(cli(state, profile, "up", "tp2", "--skip-preflight")[1], "up tp2")
    return first_token(api, model, t0 + 300) - t0


def reboot(state: str, lab: Lab, profile: Path, api: str, model: str) -> float:
    prof = load_profile_file(profile)
    for spec in build_plan(prof, "tp2").ranks:
        lab.kill_container(spec.node, spec.container_name)
    for node in lab.nodes:
        lab.restart_dockerd(node)
    Path(state, "sparkctl", "clusters", f"{prof.cluster}.json").unlink(missing_ok=True)
    unit = Path(lab.node("spark1").node_root, "systemd", f"sparkctl-supervise-{prof.cluster}.service")
    argv, unit_env = unit_command(unit)
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), **unit_env}
    env["PYTHONPATH"] = str(ROOT / "src")
    t0 = time.monotonic()
    sup = subprocess.Popen(
        argv,
        env=env,
        cwd="/",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        return first_token(api, model, t0 + 300) - t0
    finally:
        os.killpg(sup.pid, signal.SIGTERM)
        sup.wait(timeout=60)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--delay-load", type=float, default=2.0, help="stand-in load time (s)")
    args = ap.parse_args()
    state = tempfile.mkdtemp(prefix="sparkctl-bench-")
    res: dict[str, list[float]] = {"plain": [], "reboot": []}
    with Lab(nodes=2) as lab:
        lab.install_engine_image()
        seed_weights(lab)
        env = {"STANDIN_DELAY_LOAD": str(args.delay_load)}
        modes = {
            "solo": {"nodes": ["spark1"], "tp": 1, "default": True},
            "tp2": {"nodes": ["spark1", "spark2"], "tp": 2, "env": env},
        }
        profile = write_lab_profile(
            lab, Path(state) / "sparkctl.yaml", modes=modes, engine={"ready_timeout": 300}
        )
        plan = build_plan(load_profile_file(profile), "tp2")
        api, model = plan.endpoint.api_base, plan.endpoint.served_model_name
        must(
            cli(state, profile, "persist", "install", "tp2", "--unit-dir", f"{NODE_MOUNT}/systemd")[1],
            "persist",
        )
        for i in range(args.rounds):
            print(f"round {i + 1}/{args.rounds}", flush=True)
            res["plain"].append(plain_up(state, profile, api, model))
            res["reboot"].append(reboot(state, lab, profile, api, model))
            print(
                f"  plain up -> first token {res['plain'][-1]:.2f}s; reboot -> first token {res['reboot'][-1]:.2f}s"
            )
        must(cli(state, profile, "down")[1], "down")
        must(
            cli(state, profile, "persist", "remove", "tp2", "--unit-dir", f"{NODE_MOUNT}/systemd")[1],
            "remove",
        )
    med = {k: statistics.median(v) for k, v in res.items()}
    print(f"\nmedians of {args.rounds} (stand-in load {args.delay_load:g}s):")
    print(f"  plain `up tp2` (CLI start -> first token):                 {med['plain']:.2f}s")
    print(f"  reboot (unit's command start -> first token, no command):   {med['reboot']:.2f}s")
    print(
        f"  difference (waiting for nodes, reconcile, the state rebuilt): {med['reboot'] - med['plain']:+.2f}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
