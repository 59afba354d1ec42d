"""The filtering front's cost (node/front.py): requests/s, time to first token and streamed tokens/s
through the front against the engine directly, in the same run, with the ratio.

The engine is a uvicorn + starlette app (what SGLang and vLLM serve with) on 127.0.0.1: `/v1/models`
(a small JSON answer) and an SSE completion of `--tokens` events, `--gap` seconds apart (0: as
fast as it can). The front runs in its own process, as on a node (`python3 -S`, the node program).

    python bench/front.py [--concurrency 8] [--seconds 5] [--tokens 256] [--streams 20]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

ENGINE = r"""
import asyncio, json, sys
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

TOKENS, GAP = int(sys.argv[2]), float(sys.argv[3])

async def models(request):
    return JSONResponse({"object": "list", "data": [{"id": "bench", "object": "model"}]})

async def completions(request):
    await request.body()
    async def events():
        for i in range(TOKENS):
            if GAP:
                await asyncio.sleep(GAP)
            chunk = {"choices": [{"index": 0, "text": " tok%d" % i}]}
            yield "data: " + json.dumps(chunk) + "\n\n"
        yield "data: [DONE]\n\n"
    return StreamingResponse(events(), media_type="text/event-stream")

app = Starlette(routes=[Route("/v1/models", models), Route("/v1/completions", completions, methods=["POST"])])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def requests_per_s(port: int, concurrency: int, seconds: float) -> float:
    done = [0] * concurrency
    stop = time.monotonic() + seconds

    def worker(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.monotonic() < stop:
            conn.request("GET", "/v1/models", headers={"Authorization": "Bearer k"})
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200
            done[i] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.monotonic() - t0)


def one_stream(port: int) -> tuple[float, float, int]:
    """(time to first token s, tokens/s after it, tokens) of one streamed completion."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = json.dumps({"model": "bench", "prompt": "hi", "stream": True})
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    first, tokens, buf = None, 0, b""
    while piece := resp.read1(1 << 16):
        if first is None:
            first = time.monotonic()
        buf += piece
        tokens = buf.count(b'"text"')
    end = time.monotonic()
    assert b"[DONE]" in buf and first is not None
    return first - t0, (tokens - 1) / max(end - first, 1e-9), tokens


def streams(port: int, n: int) -> tuple[float, float]:
    got = [one_stream(port) for _ in range(n)]
    return statistics.median(g[0] for g in got), statistics.median(g[1] for g in got)


def start_front(upstream: int) -> tuple[subprocess.Popen, int]:
    port = free_port()
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from sparkctl.node.front import listen_socket, make_server;"
        "make_server(listen_socket('127.0.0.1', int(sys.argv[2])), int(sys.argv[3]),"
        " ('/server_info', '/get_server_info')).serve_forever()"
    )
    proc = subprocess.Popen([sys.executable, "-S", "-c", code, str(ROOT / "src"), str(port), str(upstream)])
    wait_port(port)
    return proc, port


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--gap", type=float, default=0.0, help="seconds between streamed tokens")
    ap.add_argument("--streams", type=int, default=20)
    a = ap.parse_args()
    engine_port = free_port()
    engine = subprocess.Popen([sys.executable, "-c", ENGINE, str(engine_port), str(a.tokens), str(a.gap)])
    front = None
    try:
        wait_port(engine_port)
        front, front_port = start_front(engine_port)
        rows = {}
        for name, port in (("direct", engine_port), ("front", front_port)):
            streams(port, 2)  # warm both paths
            rps = requests_per_s(port, a.concurrency, a.seconds)
            ttft, tps = streams(port, a.streams)
            rows[name] = (rps, ttft, tps)
        print(f"{os.cpu_count()} CPUs; /v1/models x{a.concurrency} for {a.seconds:g} s; {a.streams} streams")
        print(f"of {a.tokens} tokens (gap {a.gap:g} s), medians")
        print(f"{'':8} {'requests/s':>12} {'TTFT ms':>10} {'stream tok/s':>14}")
        for name, (rps, ttft, tps) in rows.items():
            print(f"{name:8} {rps:12.0f} {ttft * 1000:10.2f} {tps:14.0f}")
        d, f = rows["direct"], rows["front"]
        print(f"{'ratio':8} {f[0] / d[0]:12.2f} {f[1] / d[1]:10.2f} {f[2] / d[2]:14.2f}  (front / direct)")
    finally:
        for p in (front, engine):
            if p is not None:
                p.terminate()
                p.wait(10)


if __name__ == "__main__":
    main()
