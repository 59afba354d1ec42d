"""Faults on the real engine under the supervisor, with the engine's own reaction beside each, in one run.

    flock /tmp/sparkctl-realengine.lock python3 bench/faults.py [--faults idle-kill,partition,orphan]
        [--hold 10] [--alone-wait 30]   (root, repo root; the first run builds the vLLM CPU image)

The real-engine tier's lab: vLLM's CPU build, the tiny random Qwen3, mode tp2 across the lab's two
nodes (tests/testbed/realengine.py). Measured through the real CLI, from the outside:

  start      `up tp2` from a clean cluster: CLI start -> the first token of a 1-token chat (the
             group's start time: what "serving again" is compared with);
  idle-kill  rank 1's container SIGKILLed while the group idles;
  partition  spark2's fabric cable pulled (the management network, SSH, stays up), plugged back
             --hold s after the supervisor acted;
  orphan     rank 0's container SIGKILLed (the headless rank 1 is left alone).

Each fault twice: (1) the engine alone (no supervisor): what vLLM does by itself within
--alone-wait s (/health, the next request, rank 0's exit, the orphan's life), then `down` + `up`;
(2) supervised (`supervise tp2 --detach`, the default policy): fault -> detection (the
supervisor's `restarting` event) -> serving again (a first token), and for the orphan fault ->
rank 1 gone. Printed with their ratios to the baselines measured in the same run: detection
against the heartbeat's bound (SILENT_S + EVERY_S: a partition cannot be told sooner) and against
the engine alone, serving again against the group's start time. Not part of CI (a real engine
starts in 30-120 s on a shared 2-core host).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.testbed.lab import Lab  # noqa: E402
from tests.testbed.realengine import SERVED, install_real_engine, write_vllm_profile  # noqa: E402

from _cli import cli, must  # noqa: E402
from sparkctl.lifecycle import state as events_log  # noqa: E402
from sparkctl.lifecycle.supervisor.heartbeat import EVERY_S, SILENT_S  # noqa: E402
from sparkctl.planning.build import build_plan  # noqa: E402
from sparkctl.profile import load_profile_file  # noqa: E402

FAULTS = ("idle-kill", "partition", "orphan")
TP2 = {"nodes": ["spark1", "spark2"], "tp": 2, "default": True}
GOALS = {"idle-kill": 3.0, "partition": 10.0, "orphan": 5.0}  # issue 41: detection (orphan: stopped)


def chat(api_base: str, timeout: float) -> tuple[str, float]:
    """One 1-token chat: ('ok' | 'HTTP 500' | the error, seconds it took)."""
    body = json.dumps({"model": SERVED, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
    req = urllib.request.Request(
        f"{api_base}/chat/completions", data=body.encode(), headers={"Content-Type": "application/json"}
    )
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            ok = bool(json.loads(resp.read()).get("choices"))
            return ("ok" if ok else "no choices"), time.monotonic() - t0
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}", time.monotonic() - t0
    except OSError as exc:
        return f"{type(exc).__name__}", time.monotonic() - t0


def first_token(api_base: str, deadline: float) -> float:
    """Monotonic time of the first successful 1-token chat (polled every 0.2 s)."""
    while time.monotonic() < deadline:
        if chat(api_base, 5)[0] == "ok":
            return time.monotonic()
        time.sleep(0.2)
    raise SystemExit("no first token before the deadline")


def health(url: str) -> str:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=10) as resp:
            return str(resp.status)
    except urllib.error.HTTPError as exc:
        return str(exc.code)
    except OSError as exc:
        return type(exc).__name__


class Bench:
    def __init__(self, lab: Lab, state: str, profile: Path, alone_wait: float, hold: float) -> None:
        self.lab, self.state, self.profile = lab, state, profile
        self.alone_wait, self.hold = alone_wait, hold
        self.prof = load_profile_file(profile)
        self.plan = build_plan(self.prof, "tp2")
        self.api, self.url = self.plan.endpoint.api_base, self.plan.endpoint.url
        self.r0, self.r1 = self.plan.ranks

    def up(self) -> float:
        """`up tp2` from a clean cluster, CLI start -> first token."""
        must(cli(self.state, self.profile, "down")[1], "down")
        t0 = time.monotonic()
        must(cli(self.state, self.profile, "up", "tp2", "--skip-preflight")[1], "up tp2")
        return first_token(self.api, t0 + 900) - t0

    def status(self, spec) -> str:  # noqa: ANN001 - a RankSpec
        try:
            c = self.lab.docker(spec.node).containers.get(spec.container_name)
        except Exception:  # noqa: BLE001 - docker.errors.NotFound
            return "gone"
        return c.status if c.status != "exited" else f"exited {c.attrs['State']['ExitCode']}"

    def inject(self, fault: str) -> float:
        """The fault; its wall-clock time (the events' clock)."""
        at = time.time()
        if fault == "partition":
            self.lab.set_fabric_link(self.r1.node, up=False)
        else:
            spec = self.r1 if fault == "idle-kill" else self.r0
            self.lab.kill_container(spec.node, spec.container_name)
        return at

    def alone(self, fault: str) -> str:
        """What the engine does by itself within --alone-wait s."""
        self.inject(fault)
        end = time.monotonic() + self.alone_wait
        if fault == "partition":
            got, took = chat(self.api, self.alone_wait)
            self.lab.set_fabric_link(self.r1.node, up=True)
            return f"/health {health(self.url)}; the next request: {got} after {took:.1f}s"
        if fault == "idle-kill":
            time.sleep(2)
            got, took = chat(self.api, 60)
            line = f"/health {health(self.url)} 2 s after; the next request: {got} after {took:.1f}s"
            while time.monotonic() < end and self.status(self.r0) == "running":
                time.sleep(0.5)
            return f"{line}; rank 0 {self.status(self.r0)} at {self.alone_wait:.0f}s"
        time.sleep(max(0.0, end - time.monotonic()))
        return f"rank 1 (headless) {self.status(self.r1)} {self.alone_wait:.0f}s after rank 0's kill"

    def supervised(self, fault: str) -> dict[str, float]:
        since = time.time()
        must(cli(self.state, self.profile, "supervise", "tp2", "--detach")[1], "supervise --detach")
        wait(lambda: any(e["event"] == "supervising" for e in self.events(since)), 60, "supervising")
        at = self.inject(fault)
        t_fault = time.monotonic()
        out: dict[str, float] = {}
        try:
            hit = wait(lambda: self.first("restarting", at), 300, "the supervisor's restart")
            out["detected"] = hit["at"] - at
            if fault == "orphan":
                gone = wait(lambda: self.status(self.r1) != "running" or None, 120, "rank 1 stopped")
                out["orphan_stopped"] = time.monotonic() - t_fault if gone else float("nan")
        finally:
            if fault == "partition":
                time.sleep(self.hold)
                self.lab.set_fabric_link(self.r1.node, up=True)
        t_back = time.monotonic()
        out["serving"] = first_token(self.api, t_back + 900) - (t_back if fault == "partition" else t_fault)
        must(cli(self.state, self.profile, "supervise", "--stop")[1], "supervise --stop")
        return out

    def events(self, since: float) -> list[dict]:
        return events_log.events(self.prof.cluster, since=since)

    def first(self, kind: str, since: float) -> dict | None:
        return next((e for e in self.events(since) if e["event"] == kind), None)


def wait(cond, timeout: float, what: str):  # noqa: ANN001, ANN201 - a predicate, its value
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--faults", default=",".join(FAULTS), help="comma-separated, of: " + ", ".join(FAULTS))
    ap.add_argument("--hold", type=float, default=10.0, help="partition: seconds the cable stays out")
    ap.add_argument("--alone-wait", type=float, default=30.0, help="seconds to watch the engine alone")
    args = ap.parse_args()
    faults = [f for f in args.faults.split(",") if f]
    if unknown := set(faults) - set(FAULTS):
        raise SystemExit(f"unknown faults: {', '.join(sorted(unknown))}")
    state = tempfile.mkdtemp(prefix="sparkctl-bench-")
    os.environ["XDG_STATE_HOME"] = state  # the supervisor's event log, read here directly
    rows: dict[str, tuple[str, dict[str, float]]] = {}
    with Lab(nodes=2) as lab:
        install_real_engine(lab)
        profile = write_vllm_profile(lab, Path(state) / "vllm.yaml", modes={"tp2": TP2})
        bench = Bench(lab, state, profile, args.alone_wait, args.hold)
        ups = [bench.up()]
        print(f"start: `up tp2` -> first token {ups[0]:.1f}s", flush=True)
        for fault in faults:
            alone = bench.alone(fault)
            print(f"{fault}, engine alone: {alone}", flush=True)
            ups.append(bench.up())
            print(f"start again: `up tp2` -> first token {ups[-1]:.1f}s", flush=True)
            got = bench.supervised(fault)
            rows[fault] = (alone, got)
            print(f"{fault}, supervised: " + ", ".join(f"{k} {v:.1f}s" for k, v in got.items()), flush=True)
        must(cli(state, profile, "down")[1], "down")
    bound, start = SILENT_S + EVERY_S, statistics.median(ups)
    starts = ", ".join(f"{u:.0f}" for u in ups)
    print(
        f"\nreal vLLM (CPU) tp2 on two lab nodes; start (`up` -> first token) median {start:.1f}s of {starts}"
    )
    head = f"{'fault':<10} {'detected':>9} {'goal':>5} {'/bound':>7} {'serving again':>14} {'/start':>7}"
    print(f"{head}  engine alone")
    for fault, (alone, got) in rows.items():
        det = got["orphan_stopped"] if fault == "orphan" else got["detected"]
        ratio = f"{det / bound:.2f}x" if fault == "partition" else "-"
        print(
            f"{fault:<10} {det:>8.1f}s {GOALS[fault]:>4.0f}s {ratio:>7} {got['serving']:>13.1f}s"
            f" {got['serving'] / start:>6.2f}x  {alone}"
        )
    print(
        f"(partition: detection vs the heartbeat's bound {bound:.0f}s = silent {SILENT_S:.0f}s + a"
        " check; serving again from the cable plugged back; orphan: rank 1 stopped after rank 0's kill)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
