"""Benchmark sparkctl's `up` against starting the same real engine by hand, in the same run.

    python bench/engine.py [--modes solo,tp2] [--rounds 2]   (root, repo root)

Real vLLM (CPU build, tiny random Qwen3: tests/testbed/realengine.py) on a 2-node lab. Per mode,
one uncounted warm-up start (page cache, first imports), then rounds in alternating order:
  baseline: the recipe's hand start: `docker run -d` of every rank (the plan's exact argv, env,
    mounts, shm) straight on each node's dockerd, then poll until a streamed chat completion
    yields its first token;
  sparkctl: `sparkctl up MODE` (preflight included, as users run it), then the same first token.
Printed: seconds to first token of each and the ratio sparkctl / baseline (the overhead of
preflight, planning, SSH and supervision of the start over the engine's own start time).

Then (unless --no-tokps) the real engine's tokens/s as `sparkctl bench` measures it against an
independent client in the same run, on one `sparkctl up` of the first mode: `sparkctl bench -w
code` (single stream, greedy, `--max-tokens`) and a plain urllib streaming loop sending the same
prompt with the same limits, taking its own clock and the server's usage counts, in alternating
order. Printed: decode tok/s (tokens after the first / time after the first) and end-to-end tok/s
(tokens / request time), medians of each side, and the ratio bench / client (1.00: bench reports
what a client sees; below 1: bench's own overhead slows or under-counts).
"""

from __future__ import annotations

import argparse
import json
import os
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

from tests.testbed.lab import Lab  # noqa: E402
from tests.testbed.realengine import SERVED, install_real_engine, write_vllm_profile  # noqa: E402

from _cli import cli, must  # noqa: E402
from sparkctl.benchmark.workloads import Workload  # noqa: E402
from sparkctl.planning.build import build_plan  # noqa: E402
from sparkctl.profile import load_profile_file  # noqa: E402
from sparkctl.runtime.containers import revealed_env  # noqa: E402

DEADLINE_S = 600.0
CODE_PROMPT = Workload("code", "code", 1).messages(0)[0]["content"]  # the prompt `bench -w code` sends


def first_token(api_base: str, deadline: float) -> None:
    """Retry a streamed chat until its first content chunk arrives (or the deadline passes)."""
    body = json.dumps(
        {"model": SERVED, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}
    ).encode()
    while time.monotonic() < deadline:
        req = urllib.request.Request(
            f"{api_base}/chat/completions", data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                for raw in resp:
                    line = raw.decode().strip()
                    if line.startswith("data: {") and '"content"' in line:
                        return
        except OSError:
            pass
        time.sleep(0.25)
    raise SystemExit(f"no first token from {api_base} within {DEADLINE_S:.0f} s")


def recipe_argv(spec) -> list[str]:  # RankSpec
    """The rank's argv as the recipe starts it: no gateway, the engine itself on the API's address
    and port (the plan puts it on 127.0.0.1 behind the gateway)."""
    argv = list(spec.argv)
    if spec.gateway is not None:
        i = argv.index("--host")
        assert argv[i + 2] == "--port", argv
        argv[i : i + 4] = ["--host", spec.gateway.listen, "--port", str(spec.gateway.port)]
    return argv


def docker_run_by_hand(lab: Lab, plan) -> float:  # Plan
    """The recipe: `docker run -d` each rank on its node (same argv, env, mounts, 1 GiB shm)."""
    t0 = time.monotonic()
    for spec in plan.ranks:
        node = lab.node(spec.node)
        argv = ["docker", "-H", node.docker_host, "run", "-d", "--name", f"byhand-{spec.container_name}"]
        argv += ["--network", "host", "--shm-size", spec.options.shm_size or "1g"]
        for m in spec.mounts:
            argv += ["-v", f"{m.source}:{m.target}{':ro' if m.read_only else ''}"]
        for k, v in revealed_env(spec).items():
            argv += ["-e", f"{k}={v}"]
        argv += [spec.image, *recipe_argv(spec)]
        subprocess.run(argv, check=True, capture_output=True)
    first_token(plan.endpoint.api_base, t0 + DEADLINE_S)
    took = time.monotonic() - t0
    for spec in plan.ranks:
        node = lab.node(spec.node)
        subprocess.run(
            ["docker", "-H", node.docker_host, "rm", "-f", f"byhand-{spec.container_name}"],
            capture_output=True,
        )
    return took


def sparkctl_up(state: str, path: Path, plan, mode: str) -> float:  # Plan
    """`up MODE --json` to the first token; prints where up's seconds went (its timeline) and how
    long `down` of the serving group took."""
    t0 = time.monotonic()
    _, proc = cli(state, path, "up", mode, "--json")
    must(proc, f"up {mode}")
    first_token(plan.endpoint.api_base, t0 + DEADLINE_S)
    took = time.monotonic() - t0
    steps = json.loads(proc.stdout).get("timeline", [])
    print(f"  {mode} up timeline: " + "; ".join(f"{timeline_step(s)} {s['seconds']:.1f}s" for s in steps))
    down_s, down = cli(state, path, "down")
    must(down, "down")
    print(f"  {mode} down: {down_s:.1f}s (engine.stop_grace {load_profile_file(path).engine.stop_grace}s)")
    return took


def timeline_step(step: dict) -> str:
    return step["step"] if step.get("rank") is None else f"{step['step']} r{step['rank']}"


def client_stream(api_base: str, max_tokens: int) -> tuple[float, float]:
    """One streamed request as a plain client sees it: (decode tok/s, end-to-end tok/s)."""
    body = {
        "model": SERVED,
        "messages": [{"role": "user", "content": CODE_PROMPT}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "chat_template_kwargs": {"enable_thinking": False},
    }
    req = urllib.request.Request(
        f"{api_base}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    t0, first, tokens = time.monotonic(), None, 0
    with urllib.request.urlopen(req, timeout=300) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if first is None and any(
                (c.get("delta") or {}).get("content") for c in chunk.get("choices") or []
            ):
                first = time.monotonic()
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    end = time.monotonic()
    if first is None or tokens < 2:
        raise SystemExit(f"the client got {tokens} tokens from {api_base}: nothing to rate")
    return (tokens - 1) / (end - first), tokens / (end - t0)


def bench_stream(state: str, path: Path, mode: str, reps: int, max_tokens: int) -> tuple[list, list]:
    """`sparkctl bench MODE -w code`: each request's (decode tok/s, end-to-end tok/s)."""
    args = ("bench", mode, "-w", "code", "--reps", str(reps), "--max-tokens", str(max_tokens), "--json")
    _, proc = cli(state, path, *args)
    must(proc, "bench")
    samples = json.loads(proc.stdout)["workloads"][0]["samples"]
    return (
        [s["decode_tps"] for s in samples if s["decode_tps"]],
        [s["completion_tokens"] / s["e2e_s"] for s in samples if s["e2e_s"] > 0],
    )


def tokps(state: str, path: Path, plan, mode: str, rounds: int, reps: int, max_tokens: int) -> None:  # Plan
    """sparkctl bench's tok/s against the independent client's, on one `up` (alternating order)."""
    must(cli(state, path, "up", mode)[1], f"up {mode}")
    try:
        client_stream(plan.endpoint.api_base, max_tokens)  # warm-up, not counted
        ours: tuple[list, list] = ([], [])
        theirs: tuple[list, list] = ([], [])
        for r in range(rounds):
            for side in ("bench", "client") if r % 2 == 0 else ("client", "bench"):
                if side == "bench":
                    dec, e2e = bench_stream(state, path, mode, reps, max_tokens)
                    ours[0].extend(dec), ours[1].extend(e2e)
                else:
                    for _ in range(reps):
                        dec1, e2e1 = client_stream(plan.endpoint.api_base, max_tokens)
                        theirs[0].append(dec1), theirs[1].append(e2e1)
        for i, what in enumerate(("decode", "end-to-end")):
            if not ours[i] or not theirs[i]:  # bench gives no decode rate for a stream in one burst
                print(f"{mode}: {what} tok/s: n/a ({len(ours[i])} vs {len(theirs[i])} rated requests)")
                continue
            b, c = statistics.median(ours[i]), statistics.median(theirs[i])
            print(
                f"{mode}: {what} tok/s ({len(ours[i])} vs {len(theirs[i])} requests, {max_tokens} max "
                f"tokens): sparkctl bench {b:.1f}, independent client {c:.1f}, ratio {b / c:.2f}"
            )
    finally:
        must(cli(state, path, "down")[1], "down")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="solo", help="comma-separated: solo, tp2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-tokps", action="store_true", help="skip bench-vs-client tok/s")
    ap.add_argument("--reps", type=int, default=4, help="requests per side and round (tok/s)")
    ap.add_argument("--max-tokens", type=int, default=128, help="tokens per request (tok/s)")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # progress as it comes, also into a file
    with Lab(nodes=2) as lab, tempfile.TemporaryDirectory() as tmp:
        setup = install_real_engine(lab)
        print(f"image: built={setup['built']} build {setup['build_s']:.0f}s load {setup['load_s']:.0f}s")
        path = write_vllm_profile(lab, Path(tmp, "vllm.yaml"))
        prof = load_profile_file(path)
        os.environ.setdefault("PYTHONPATH", str(ROOT / "src"))
        for mode in args.modes.split(","):
            plan = build_plan(prof, mode)
            print(f"{mode} warm-up (not counted): docker run {docker_run_by_hand(lab, plan):.1f}s")
            base, ours = [], []
            for r in range(args.rounds):  # the order alternates: neither side always goes second
                state = str(Path(tmp, f"state-{mode}-{r}"))
                if r % 2:
                    ours.append(sparkctl_up(state, path, plan, mode))
                    base.append(docker_run_by_hand(lab, plan))
                else:
                    base.append(docker_run_by_hand(lab, plan))
                    ours.append(sparkctl_up(state, path, plan, mode))
                print(f"{mode} round {r + 1}: docker run {base[-1]:.1f}s, sparkctl up {ours[-1]:.1f}s")
            b, o = statistics.median(base), statistics.median(ours)
            print(
                f"{mode}: to first token: docker run by hand {b:.1f}s, sparkctl up {o:.1f}s, ratio {o / b:.2f}"
            )
        if not args.no_tokps:
            mode = args.modes.split(",")[0]
            state = str(Path(tmp, f"state-{mode}-tokps"))
            tokps(state, path, build_plan(prof, mode), mode, args.rounds, args.reps, args.max_tokens)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
