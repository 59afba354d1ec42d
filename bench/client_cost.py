"""What `sparkctl bench`'s own client costs in CPU per streamed token, against a plain urllib
streaming client (the baseline bench/engine.py compares its rates with), in the same run.

Why it matters: on a host where the engine is CPU-bound (the testbed's vLLM on 2 cores), every
CPU second the client spends is taken from the engine, so a heavier client measures a slower
engine. bench/engine.py found `sparkctl bench`'s decode rate 0.83x the plain client's there; this
prints how much of that the client's own weight can explain.

The engine is a uvicorn + starlette app on 127.0.0.1 answering `/v1/models` and a streamed chat
completion of `max_tokens` chunks (`--gap` seconds apart) with a final usage chunk. Each client
runs in its own process twice, with `--small` and `--large` tokens per request and the same
number of requests; the marginal CPU per token is (CPU(large) - CPU(small)) / (token difference),
which leaves out start-up, imports and the probe.

    python bench/client_cost.py [--small 300] [--large 1500] [--reps 2] [--gap 0.0005]
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = "bench"

ENGINE = r"""
import asyncio, json, sys
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

GAP = float(sys.argv[2])
MODEL = "bench"

async def models(request):
    return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model", "max_model_len": 8192}]})

def chunk(delta, usage=None, finish=None):
    doc = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": MODEL,
           "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage:
        doc["usage"] = usage
    return "data: " + json.dumps(doc) + "\n\n"

async def completions(request):
    body = json.loads(await request.body())
    n = int(body.get("max_tokens") or 16)
    async def events():
        yield chunk({"role": "assistant", "content": ""})
        for i in range(n):
            if GAP:
                await asyncio.sleep(GAP)
            yield chunk({"content": " t%d" % i}, finish="length" if i == n - 1 else None)
        yield chunk({}, usage={"prompt_tokens": 40, "completion_tokens": n, "total_tokens": 40 + n})
        yield "data: [DONE]\n\n"
    return StreamingResponse(events(), media_type="text/event-stream")

app = Starlette(routes=[Route("/v1/models", models), Route("/v1/chat/completions", completions, methods=["POST"])])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error")
"""

# The baseline: the same client as bench/engine.py's client_stream (urllib, one JSON parse a line).
PLAIN = r"""
import json, sys, urllib.request
url, n, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
for _ in range(reps + 1):  # one more: bench also sends a warm-up request per workload
    body = {"model": "bench", "messages": [{"role": "user", "content": "x"}], "max_tokens": n,
            "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    tokens = 0
    with opener.open(req, timeout=300) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
    assert tokens == n, tokens
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(base: str) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for _ in range(300):
        try:
            opener.open(base + "/models", timeout=1).read()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("the engine did not start")


def child_cpu(argv: list[str]) -> float:
    """CPU seconds (user + system) the child process spent."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "NO_PROXY": "*"}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:4]} failed: {proc.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def bench_argv(base: str, n: int, reps: int) -> list[str]:
    return [
        sys.executable, "-m", "sparkctl", "bench", "--url", base, "--model", MODEL,
        "-w", "code", "--reps", str(reps), "--max-tokens", str(n), "--json",
    ]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=int, default=300)
    ap.add_argument("--large", type=int, default=1500)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--gap", type=float, default=0.0005, help="seconds between token events")
    args = ap.parse_args()
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    engine = subprocess.Popen([sys.executable, "-c", ENGINE, str(port), str(args.gap)])
    try:
        wait_up(base)
        tokens = (args.large - args.small) * (args.reps + 1)  # + the warm-up request
        per_token = {}
        for name, argv in (
            ("sparkctl bench", lambda n: bench_argv(base, n, args.reps)),
            ("plain client", lambda n: [sys.executable, "-c", PLAIN, base, str(n), str(args.reps)]),
        ):
            small, large = child_cpu(argv(args.small)), child_cpu(argv(args.large))
            per_token[name] = (large - small) / tokens
            print(f"{name}: {small:.2f} s CPU at {args.small} tokens, {large:.2f} s at {args.large}")
    finally:
        engine.terminate()
        engine.wait(timeout=30)
    ours, theirs = per_token["sparkctl bench"], per_token["plain client"]
    print(
        f"client CPU per streamed token: sparkctl bench {ours * 1e6:.0f} us, plain client "
        f"{theirs * 1e6:.0f} us, ratio {ours / theirs:.2f} (bench / plain)"
    )
    for rate in (400, 2000):
        print(
            f"  at {rate} tok/s: bench's client takes {ours * rate * 100:.1f} % of one core, "
            f"the plain client {theirs * rate * 100:.1f} %"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
