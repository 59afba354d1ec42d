"""Benchmark an on-demand start against `up` of the same service by hand, in the same run.

    python bench/fleet_on_demand.py [--rounds 2]   (root, repo root)

Real vLLM (CPU build, two tiny random Qwen3s: tests/testbed/realengine.py write_fleet_profile) on
a 2-node lab: `chat` pinned on spark1, `coder` on demand (idle_stop 10 s) on spark2, one endpoint.
Rounds in alternating order, each from the coder stopped:
  by hand: `sparkctl up coder`, timed to the first streamed token of a request for it at the
    fleet endpoint (no supervisor runs; the request waits at the gateway until up brings it);
  on demand: the fleet's supervisor runs (`supervise --detach`); one streamed request for the
    coder, timed to its first token (the gateway holds it, the supervisor starts the service).
Printed: seconds to first token of each, and the ratio on demand / by hand (1.00: starting on a
request costs nothing over a start by hand; the supervisor polls the gateway each second).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.testbed.lab import Lab  # noqa: E402
from tests.testbed.realengine import install_real_engine, write_fleet_profile  # noqa: E402
from tests.testbed.tiny_model import SECOND_ID, seed_tiny_model  # noqa: E402
from tests.testbed.vllm_image import VLLM_TAG  # noqa: E402

from _cli import cli, must  # noqa: E402

DEADLINE_S = 600.0
MODEL = "tiny-coder"


def first_token(base: str) -> float:
    """Seconds until a streamed chat for the coder yields its first content chunk."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}
    t0 = time.monotonic()
    while time.monotonic() - t0 < DEADLINE_S:
        req = urllib.request.Request(
            f"{base}/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=DEADLINE_S) as resp:
                for raw in resp:
                    if raw.startswith(b"data: {") and b'"content"' in raw:
                        return time.monotonic() - t0
        except OSError:
            time.sleep(0.25)  # a 503 before the gateway knew the service: ask again
    raise SystemExit(f"no first token from {base} within {DEADLINE_S:.0f} s")


def coder_state(state: str, path: Path) -> str:
    _, proc = cli(state, path, "status", "--json")
    return {s["name"]: s["state"] for s in json.loads(proc.stdout)["services"]}.get("coder", "?")


def by_hand(state: str, path: Path, base: str) -> float:
    import threading

    t0 = time.monotonic()
    waited: list[float] = []
    client = threading.Thread(target=lambda: waited.append(first_token(base)))
    client.start()  # the request waits at the gateway while `up` starts the coder
    must(cli(state, path, "up", "coder")[1], "up coder")
    client.join()
    took = time.monotonic() - t0
    must(cli(state, path, "down", "coder")[1], "down coder")
    return took


def on_demand(state: str, path: Path, base: str) -> float:
    must(cli(state, path, "supervise", "--detach")[1], "supervise --detach")
    took = first_token(base)
    deadline = time.monotonic() + 180
    while coder_state(state, path) != "idle-stopped":  # idle_stop 10 s: back where it started
        if time.monotonic() > deadline:
            raise SystemExit("the coder did not idle-stop within 180 s")
        time.sleep(1.0)
    must(cli(state, path, "supervise", "--stop")[1], "supervise --stop")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    with Lab(nodes=2) as lab, tempfile.TemporaryDirectory() as tmp:
        install_real_engine(lab)
        seed_tiny_model(lab, SECOND_ID)
        engine = {"kind": "vllm", "container": {"gpus": False, "shm_size": "1g"}}
        path = write_fleet_profile(lab, Path(tmp, "fleet.yaml"), VLLM_TAG, engine)
        os.environ.setdefault("PYTHONPATH", str(ROOT / "src"))
        state = str(Path(tmp, "state"))
        _, proc = cli(state, path, "up", "--json")  # chat, and the gateway
        must(proc, "up")
        base = json.loads(proc.stdout)["gateway"]["url"]
        try:
            print(f"warm-up (not counted): by hand {by_hand(state, path, base):.1f}s")
            hand, demand = [], []
            for r in range(args.rounds):
                for side in ("hand", "demand") if r % 2 == 0 else ("demand", "hand"):
                    if side == "hand":
                        hand.append(by_hand(state, path, base))
                    else:
                        demand.append(on_demand(state, path, base))
                print(f"round {r + 1}: up by hand {hand[-1]:.1f}s, on demand {demand[-1]:.1f}s")
            h, d = statistics.median(hand), statistics.median(demand)
            print(f"coder to first token: up by hand {h:.1f}s, on demand {d:.1f}s, ratio {d / h:.2f}")
        finally:
            cli(state, path, "down")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
