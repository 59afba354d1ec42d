"""The gateway's cost and its bounds (issue 38, planning/gateway.py): HAProxy with the config sparkctl
renders, against the engine directly, interleaved in one run.

The engine is a uvicorn + starlette app (what SGLang and vLLM serve with) on 127.0.0.1: `/v1/models`
and an SSE completion of `--tokens` events `--gap` s apart (paced like an engine) or as fast as it
can (unpaced). Rows: 1/16/64 concurrent streams paced and unpaced (aggregate tokens/s, median TTFT),
`/v1/models` requests/s, and new upstream connections per keep-alive request. `--exhaust` instead
holds 1000 idle sockets, 300 slow-header clients and a 1 GB body against the gateway and prints a
keyed request's latency before/during and the gateway's RSS.

    python bench/gateway.py [--rounds 2] [--tokens 128] [--gap 0.02] [--seconds 3] | --exhaust
"""

from __future__ import annotations

import argparse
import http.client
import json
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from sparkctl.planning import gateway as gw  # noqa: E402

KEY = "bench-key"
AUTH = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}

ENGINE = r"""
import asyncio, json, sys
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

TOKENS, GAP = int(sys.argv[2]), float(sys.argv[3])

async def health(request):
    return JSONResponse({})

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

app = Starlette(routes=[Route("/health", health), Route("/v1/models", models), Route("/v1/completions", completions, methods=["POST"])])
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


def start_gateway(upstream: int, tmp: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    spec = gw.GatewaySpec(
        node="bench",
        listen="127.0.0.1",
        port=port,
        upstream_host="127.0.0.1",
        upstream_port=upstream,
        keyed=True,
    )
    (tmp / "keys").write_text(gw.key_file_text([KEY]))
    (tmp / "h.cfg").write_text(gw.haproxy_config(spec).replace(gw.KEYS_PATH, str(tmp / "keys")))
    nofile = 4 * spec.bounds.max_connections + 64

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    proc = subprocess.Popen(
        ["haproxy", "-db", "-f", str(tmp / "h.cfg")], preexec_fn=limits, stdout=subprocess.DEVNULL
    )
    wait_port(port)
    for _ in range(100):  # its engine check passes
        if status(port, "/health", {}) == 200:
            break
        time.sleep(0.1)
    return proc, port


def status(port: int, path: str, headers: dict) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path, headers=headers)
    resp = conn.getresponse()
    resp.read()
    conn.close()
    return resp.status


def requests_per_s(port: int, concurrency: int, seconds: float) -> float:
    done = [0] * concurrency
    stop = time.monotonic() + seconds

    def worker(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.monotonic() < stop:
            conn.request("GET", "/v1/models", headers=AUTH)
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


def one_stream(port: int, out: list) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    body = json.dumps({"model": "bench", "prompt": "hi", "stream": True})
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", body=body, headers=AUTH)
    resp = conn.getresponse()
    first, buf = None, b""
    while piece := resp.read1(1 << 16):
        if first is None:
            first = time.monotonic()
        buf += piece
    assert b"[DONE]" in buf and first is not None, buf[:200]
    out.append((first - t0, buf.count(b'"text"')))


def streams(port: int, n: int) -> tuple[float, float]:
    """(aggregate tokens/s, median TTFT s) of `n` concurrent streams."""
    got: list = []
    threads = [threading.Thread(target=one_stream, args=(port, got)) for _ in range(n)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    return sum(g[1] for g in got) / wall, statistics.median(g[0] for g in got)


def upstream_conns(engine_port: int) -> set[int]:
    """Local ports of established connections to the engine (from /proc/net/tcp)."""
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if f[3] == "01" and int(f[2].split(":")[1], 16) == engine_port:
            ports.add(int(f[1].split(":")[1], 16))
    return ports


def new_conns_per_request(port: int, engine_port: int, n: int = 200) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/v1/models", headers=AUTH)
    conn.getresponse().read()
    seen = upstream_conns(engine_port)
    before = set(seen)
    for _ in range(n):
        conn.request("GET", "/v1/models", headers=AUTH)
        conn.getresponse().read()
        seen |= upstream_conns(engine_port)
    return len(seen - before) / n


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def keyed_latency(port: int, n: int = 20) -> float:
    got = []
    for _ in range(n):
        t0 = time.monotonic()
        assert status(port, "/v1/models", AUTH) == 200
        got.append(time.monotonic() - t0)
    return statistics.median(got)


def exhaust(port: int, pid: int) -> None:
    base = keyed_latency(port)
    print(f"keyed /v1/models median {base * 1000:.2f} ms, gateway RSS {rss_kib(pid)} KiB at rest")
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(1000)]  # idle, nothing sent
    slow = []
    for _ in range(300):  # a head that never ends, one header line at a time
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")
        slow.append(s)
    big = socket.create_connection(("127.0.0.1", port))
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nTransfer-Encoding: chunked\r\n\r\n"
    big.sendall(head.encode() + b"40000000\r\n")  # a 1 GB chunk announced
    sent, chunk = 0, b"a" * (1 << 20)
    try:
        while sent < 1 << 30:
            big.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass
    print(f"1 GB chunk: the gateway closed after {sent >> 20} MiB: {big.recv(200)[:12]!r}")
    for s in slow:
        s.sendall(b"X-Slow: 1\r\n")
    during = keyed_latency(port)
    print(
        f"with 1000 idle + 300 slow-header sockets: keyed median {during * 1000:.2f} ms, RSS {rss_kib(pid)} KiB"
    )
    for s in [*held, *slow, big]:
        s.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--gap", type=float, default=0.02, help="seconds between paced tokens")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--exhaust", action="store_true")
    a = ap.parse_args()
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
    ports = {gap: free_port() for gap in (a.gap, 0.0)}
    engines = [
        subprocess.Popen([sys.executable, "-c", ENGINE, str(p), str(a.tokens), str(g)])
        for g, p in ports.items()
    ]
    gates = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i, p in enumerate(ports.values()):
                wait_port(p)
                (Path(tmp) / str(i)).mkdir()
                gates.append(start_gateway(p, Path(tmp) / str(i)))
            if a.exhaust:
                exhaust(gates[0][1], gates[0][0].pid)
                return
            report(a, list(ports.values()), [g[1] for g in gates])
    finally:
        for p in [*(g[0] for g in gates), *engines]:
            p.terminate()
            p.wait(10)


def report(a: argparse.Namespace, engine_ports: list[int], gate_ports: list[int]) -> None:
    rows: dict[str, dict[str, list]] = {}
    for _ in range(a.rounds):  # interleaved: direct, gateway, direct, gateway...
        for label, idx in ((f"paced {a.gap:g}s", 0), ("unpaced", 1)):
            for n in (1, 16, 64):
                for via, port in (("direct", engine_ports[idx]), ("gateway", gate_ports[idx])):
                    rows.setdefault(f"{label} x{n}", {}).setdefault(via, []).append(streams(port, n))
        for via, port in (("direct", engine_ports[1]), ("gateway", gate_ports[1])):
            rows.setdefault("/v1/models x8", {}).setdefault(via, []).append(
                (requests_per_s(port, 8, a.seconds), 0.0)
            )
    print(f"{a.rounds} interleaved rounds, {a.tokens} tokens a stream; medians over rounds")
    print(
        f"{'':18} {'direct/s':>10} {'gateway/s':>10} {'ratio':>6} {'TTFT d ms':>10} {'TTFT g ms':>10} {'+ms':>6}"
    )
    for name, r in rows.items():
        d = [statistics.median(x[i] for x in r["direct"]) for i in (0, 1)]
        g = [statistics.median(x[i] for x in r["gateway"]) for i in (0, 1)]
        print(
            f"{name:18} {d[0]:10.0f} {g[0]:10.0f} {g[0] / d[0]:6.2f} {d[1] * 1e3:10.2f} {g[1] * 1e3:10.2f} {(g[1] - d[1]) * 1e3:6.2f}"
        )
    print(
        f"new upstream connections per keep-alive request: {new_conns_per_request(gate_ports[1], engine_ports[1]):.3f}"
    )


if __name__ == "__main__":
    main()
