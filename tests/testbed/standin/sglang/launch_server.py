"""Stand-in for `python3 -m sglang.launch_server` (stdlib only; runs in the test engine image).

Looks like an SGLang launch from outside: same command line, SGLang-like log lines, a real TCP
rendezvous at --dist-init-addr between ranks, rank 0 serving the OpenAI-style API only after
all ranks joined, ranks >= 1 serving SGLang's dummy health server. Fault knobs by env:

  STANDIN_FAIL_AT="<rank>:<phase>[,...]"  phases: start, rendezvous, load, warmup, serve
                                          (rank may be "*"); at serve: die STANDIN_FAIL_AFTER s
                                          (default 3) after becoming ready
  STANDIN_DELAY_LOAD=<s>                  sleep between "Load weight begin" and "end"
  STANDIN_BIND_AFTER_LOAD=1               rank 0 binds its HTTP port only after the load (SGLang's order)
  STANDIN_NEVER_READY=1                   stay in warm-up forever (/health answers 503)
  STANDIN_RENDEZVOUS_TIMEOUT=<s>          give up the rendezvous after this long (default 60)
  STANDIN_PEER_LOSS_EXIT_S=<s>            exit (code 3) this long after a peer went away (default 1)
  STANDIN_STALL_AFTER=<s>                 s seconds after ready, generation fails (HTTP 500) while
                                          /v1/models and /health still answer: a stuck engine
  STANDIN_SIGTERM=exit|default|ignore     exit: a handler exits at once (default); default: no
                                          handler, like a plain Python engine (as PID 1 without
                                          an init it then ignores SIGTERM); ignore: SIG_IGN, an
                                          engine that never stops on SIGTERM, init or not
  STANDIN_METRICS="running=4,queue_step=1,..."  /metrics gauges and rates (see METRIC_DEFAULTS)
  STANDIN_REPLICA=<name>                  the replica's name (default: the hostname), in every
                                          generated text as "replica=<name>" and in /server_info,
                                          so tests behind a router see which replica answered
  STANDIN_ALLOC="<mb>,<every_s>,<max_mb>"  once serving and /tmp/standin-alloc-go exists (a test
                                          creates it), allocate and touch <mb> MiB every <every_s> s
                                          up to <max_mb>: a prefill running out of unified memory
  STANDIN_SHM_MB=<n> STANDIN_SHM_NAME=<f> while loading, write n MiB to /dev/shm/<f> (under
                                          `ipc: host` it stays resident after the container is
                                          gone, like a killed engine's shared memory)
  STANDIN_GEN_DELAY=<s>                   each generation request takes this long (in-flight
                                          requests for drain tests; a stream spreads it over
                                          its chunks); logs `STANDIN_GEN begin <path>` at start
  STANDIN_GATE_HOLD_MB=<n>                with --gated-launch-port: each rank holds n MiB (written,
                                          resident) while it waits at the gate, as a real rank's
                                          CUDA context and NCCL buffers do: what admission at the
                                          gate sees that admission before the start did not

Like SGLang 0.5.23's `--gated-launch-port P` (srt/distributed/gated_launch.py, called from
bootstrap.py's measure_pre_model_load_memory): after the rendezvous rank 0 starts the gate's
control server on --host:P (GET /health and POST /gate/activate answer "OK", no key; it stays up),
every rank logs "Gated launch waiting for activation. rank=N" and blocks; once activated rank 0
tells the others (SGLang broadcasts the flag each second over the world's CPU group; here over
the rendezvous connection), each logs "Gated launch activated. elapsed=S s" and only then loads
(its memory lines) and binds its HTTP port. A rank killed at the gate has allocated nothing.

Like SGLang 0.5.23: `--api-key`/`--admin-api-key` directly or from `--config FILE.yaml` (flat
`key: value` lines); with a key every route but /health*, /ready and /metrics answers 401
without `Authorization: Bearer <key>`.

argv and env are written to /tmp/standin-record.json (full) and logged as one line
`STANDIN_RECORD {...}` (values of secret-looking variables masked); `STANDIN_LEAK_ENV=NAME`
prints that variable raw, `STANDIN_LEAK_FILES=a,b` those files' content, like an engine that
logs its token.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RECORD_PATH = "/tmp/standin-record.json"
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "KEY")
PHASES = ("start", "rendezvous", "load", "warmup", "serve")
STREAM_GAP_S = 0.005  # between two stream events when STANDIN_GEN_DELAY is not set


class State:
    ready = False
    ready_at = 0.0
    args: argparse.Namespace
    peers: list[socket.socket] = []
    gate_open = threading.Event()  # --gated-launch-port: set once rank 0's gate was activated
    gate_held: list[bytes] = []  # STANDIN_GATE_HOLD_MB: what a rank holds at the gate


def log(msg: str, rank: int | None = None) -> None:
    tag = f" TP{rank}" if rank is not None else ""
    sys.stdout.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}{tag}] {msg}\n")
    sys.stdout.flush()


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(prog="sglang.launch_server", add_help=False)
    p.add_argument("--model-path", "--model", dest="model_path", default="")
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp", "--tp-size", dest="tp", type=int, default=1)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--dist-init-addr", "--nccl-init-addr", dest="dist_init_addr", default=None)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--api-key", default=None)
    p.add_argument("--admin-api-key", default=None)
    p.add_argument("--gated-launch-port", type=int, default=None)
    return p.parse_known_args(with_config(argv))


def with_config(argv: list[str]) -> list[str]:
    """SGLang's --config merge: the YAML file's options first, then the command line's."""
    if "--config" not in argv:
        return argv
    i = argv.index("--config")
    path, rest = argv[i + 1], argv[:i] + argv[i + 2 :]
    extra: list[str] = []
    with open(path) as fh:
        for line in fh:
            key, sep, value = line.strip().partition(":")
            if sep and key:
                value = value.strip()
                extra += [f"--{key.strip()}", json.loads(value) if value.startswith('"') else value]
    return extra + rest


def authorized(handler: BaseHTTPRequestHandler, path: str) -> bool:
    if path.startswith(("/health", "/ready", "/metrics")) or not State.args.api_key:
        return True
    return handler.headers.get("Authorization", "") == f"Bearer {State.args.api_key}"


def fail_spec(rank: int) -> set[str]:
    phases = set()
    for item in os.environ.get("STANDIN_FAIL_AT", "").split(","):
        r, _, phase = item.strip().partition(":")
        if phase and (r == "*" or r == str(rank)):
            phases.add(phase)
    return phases


def maybe_fail(phase: str, rank: int) -> None:
    if phase in fail_spec(rank) and phase != "serve":
        log(f"STANDIN: injected failure at phase {phase}", rank)
        log(f"RuntimeError: stand-in engine failed during {phase} (STANDIN_FAIL_AT)", rank)
        os._exit(1)


def record(argv: list[str]) -> None:
    env = dict(os.environ)
    data = {"argv": argv, "env": env, "pid": os.getpid(), "hostname": socket.gethostname()}
    with open(RECORD_PATH, "w") as fh:
        json.dump(data, fh)
    masked = {k: ("***" if any(w in k.upper() for w in SECRET_WORDS) else v) for k, v in env.items()}
    log("STANDIN_RECORD " + json.dumps({**data, "env": masked}))
    # A misbehaving engine that prints a secret (STANDIN_LEAK_ENV=NAME): sparkctl must redact it.
    leak = os.environ.get("STANDIN_LEAK_ENV")
    if leak:
        log(f"STANDIN: {leak}={os.environ.get(leak, '')}")
    for path in filter(
        None, os.environ.get("STANDIN_LEAK_FILES", "").split(",")
    ):  # e.g. HF_TOKEN_PATH's file
        with open(path) as fh:
            log(f"STANDIN: {path}={fh.read().strip()}")


# ------------------------------------------------------------------ rendezvous
def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def watch_peer(conn: socket.socket, what: str, rank: int) -> None:
    """Like NCCL: if a peer goes away, the job is dead."""
    seen = b""
    try:
        while data := conn.recv(4096):
            seen = (seen + data)[-2 * len(GATE_ACTIVATED) :]
            if GATE_ACTIVATED in seen:  # rank 0's broadcast (a rank >= 1 waits for it at the gate)
                State.gate_open.set()
    except OSError:
        pass
    log(f"Connection to {what} lost; peer went away. Exiting (like an NCCL failure).", rank)
    # A real engine notices a dead peer later still (NCCL watchdog): the death it follows stays first.
    time.sleep(float(os.environ.get("STANDIN_PEER_LOSS_EXIT_S", "1")))
    os._exit(3)


def rendezvous(args: argparse.Namespace) -> None:
    rank, nnodes = args.node_rank, args.nnodes
    if nnodes <= 1:
        return
    if not args.dist_init_addr:
        log("ValueError: --dist-init-addr is required when --nnodes > 1", rank)
        os._exit(2)
    timeout = float(os.environ.get("STANDIN_RENDEZVOUS_TIMEOUT", "60"))
    host, port = split_addr(args.dist_init_addr)
    deadline = time.monotonic() + timeout
    log(f"Init torch distributed begin. rank={rank} nnodes={nnodes} init=tcp://{host}:{port}", rank)
    if rank == 0:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", port))
        srv.listen(16)
        joined: dict[int, socket.socket] = {}
        while len(joined) < nnodes - 1:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(range(1, nnodes)) - set(joined))
                log(
                    f"Rendezvous timed out after {timeout:.0f}s at {host}:{port}: ranks {missing} never joined",
                    rank,
                )
                os._exit(4)
            srv.settimeout(left)
            try:
                conn, peer = srv.accept()
            except TimeoutError:
                continue
            conn.settimeout(10)
            try:
                hello = json.loads(conn.makefile().readline())
            except (OSError, ValueError):
                conn.close()
                continue
            joined[int(hello["rank"])] = conn
            log(f"Rank {hello['rank']} joined from {peer[0]} ({len(joined) + 1}/{nnodes})", rank)
        for r, conn in joined.items():
            conn.settimeout(None)
            conn.sendall(b'{"ok": true}\n')
            State.peers.append(conn)
            threading.Thread(target=watch_peer, args=(conn, f"rank {r}", rank), daemon=True).start()
    else:
        attempt = 0
        while True:
            attempt += 1
            try:
                conn = socket.create_connection((host, port), timeout=5)
                conn.sendall(json.dumps({"rank": rank}).encode() + b"\n")
                conn.settimeout(max(1.0, deadline - time.monotonic()))
                reply = conn.makefile().readline()
                if not reply:
                    raise OSError("closed")
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    log(
                        f"Rendezvous timed out after {timeout:.0f}s: could not reach rank 0 at "
                        f"{host}:{port} ({e}; {attempt} attempts)",
                        rank,
                    )
                    os._exit(4)
                time.sleep(0.5)
        conn.settimeout(None)
        State.peers.append(conn)
        threading.Thread(target=watch_peer, args=(conn, "rank 0", rank), daemon=True).start()
    log(f"Init torch distributed ends. rank={rank} world_size={args.tp}", rank)


# ------------------------------------------------------------------ launch gate
GATE_ACTIVATED = b'{"gate": "activated"}\n'
GATE_WAITING = "Gated launch waiting for activation."
GATE_DONE = "Gated launch activated."


class GateHandler(BaseHTTPRequestHandler):
    """Rank 0's gate control server: /health once every rank rendezvoused, POST /gate/activate."""

    def log_message(self, fmt: str, *a: object) -> None:
        log(f'gate: {self.client_address[0]} - "{self.requestline}" {a[1] if len(a) > 1 else ""}')

    def answer(self, code: int, body: str) -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.split("?")[0] == "/health":
            self.answer(200, "OK")
        else:
            self.answer(404, '{"detail":"Not Found"}')

    def do_POST(self) -> None:
        if self.path.split("?")[0] == "/gate/activate":
            self.answer(200, "OK")
            State.gate_open.set()
        else:
            self.answer(404, '{"detail":"Not Found"}')


def launch_gate(args: argparse.Namespace) -> None:
    """Block at the gate (after the rendezvous, before any allocation) until it is activated."""
    if args.gated_launch_port is None:
        return
    rank, held = args.node_rank, []
    hold_mb = int(os.environ.get("STANDIN_GATE_HOLD_MB", "0"))
    for _ in range(hold_mb):  # CUDA context and NCCL buffers: every page written, resident
        held.append(b"\x03" * (1 << 20))
    State.gate_held = held
    if rank == 0:  # SGLang's server outlives the wait (a uvicorn thread, never stopped)
        gate = ThreadingHTTPServer((args.host, args.gated_launch_port), GateHandler)
        gate.daemon_threads = True
        threading.Thread(target=gate.serve_forever, daemon=True).start()
        log(f"Gated launch control server started on {args.host}:{args.gated_launch_port}", rank)
    log(f"{GATE_WAITING} rank={rank}", rank)
    tic = time.monotonic()
    State.gate_open.wait()
    if rank == 0:
        for conn in State.peers:
            conn.sendall(GATE_ACTIVATED)
    log(f"{GATE_DONE} elapsed={time.monotonic() - tic:.2f} s", rank)


# ------------------------------------------------------------------ HTTP
def served_name(args: argparse.Namespace) -> str:
    return args.served_model_name or args.model_path


def replica_name() -> str:
    return os.environ.get("STANDIN_REPLICA") or socket.gethostname()


# ------------------------------------------------------------------ /metrics
# SGLang 0.5.23's metric names, labels and histogram buckets (tests/fixtures/sglang/generate.py).
# Counters advance with serving time at fixed rates, so two scrapes give known tokens/s; gauges
# are fixed unless overridden: STANDIN_METRICS="running=4,queue=1,queue_step=1,token_usage=0.97,
# accept_length=3.2,accept_rate=0.55,gen_tok_s=250,prompt_tok_s=1000,req_s=0.5" (queue_step: the
# queue grows by that much at every scrape).
METRIC_DEFAULTS = dict(running=4.0, queue=1.0, queue_step=0.0, token_usage=0.42, cache_hit_rate=0.3)
METRIC_DEFAULTS.update(accept_length=3.2, accept_rate=0.55, gen_tok_s=250.0, prompt_tok_s=1000.0, req_s=0.5)
# SGLang's default buckets, and the share of observations at or below each (1.0 past the listed
# ones): a fixed shape, p50 ~0.3 s TTFT and ~12 ms inter-token latency.
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
TTFT_SHARES = (0.05, 0.3, 0.7, 0.9, 0.95, 0.98)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060)
ITL_BUCKETS += (0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000)
ITL_SHARES = (0.0, 0.0, 0.01, 0.1, 0.3, 0.75, 0.9, 0.96, 0.98, 0.99)


class Metrics:
    started = time.monotonic() - 3600  # as if it had served for an hour: full histograms from the start
    scrapes = 0
    lock = threading.Lock()
    active: dict[str, int] = {}  # POST path -> requests being served (sglang:http_requests_active)


def metric_knobs() -> dict[str, float]:
    knobs = dict(METRIC_DEFAULTS)
    for item in os.environ.get("STANDIN_METRICS", "").split(","):
        key, _, value = item.strip().partition("=")
        if key in knobs and value:
            knobs[key] = float(value)
    return knobs


def _histogram(name: str, labels: str, buckets: tuple, shares: tuple, count: float, mean: float) -> list[str]:
    lines = [f"# HELP {name} Histogram.", f"# TYPE {name} histogram"]
    for i, le in enumerate(buckets):
        share = shares[i] if i < len(shares) else 1.0
        # Unrounded: the shares hold over any interval, so percentiles do not depend on scrape timing.
        lines.append(f'{name}_bucket{{{labels},le="{float(le)}"}} {count * share}')
    lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(count)}')
    lines += [f"{name}_count{{{labels}}} {float(count)}", f"{name}_sum{{{labels}}} {count * mean}"]
    return lines


def metrics_text(model: str) -> str:
    k = metric_knobs()
    with Metrics.lock:
        n = Metrics.scrapes
        Metrics.scrapes += 1
    t = time.monotonic() - Metrics.started
    tok = f'engine_type="unified",model_name="{model}"'
    sched = f'{tok},moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    gauges = {
        "num_running_reqs": k["running"],
        "num_queue_reqs": k["queue"] + n * k["queue_step"],
        "gen_throughput": k["gen_tok_s"],
        "token_usage": k["token_usage"],
        "cache_hit_rate": k["cache_hit_rate"],
        "spec_accept_length": k["accept_length"],
        "spec_accept_rate": k["accept_rate"],
        "max_total_num_tokens": 1000000.0,
    }
    lines: list[str] = []
    for name, value in gauges.items():
        lines += [
            f"# HELP sglang:{name} Gauge.",
            f"# TYPE sglang:{name} gauge",
            f"sglang:{name}{{{sched}}} {value}",
        ]
    for name, rate in (
        ("prompt_tokens", k["prompt_tok_s"]),
        ("generation_tokens", k["gen_tok_s"]),
        ("num_requests", k["req_s"]),
    ):
        lines += [
            f"# HELP sglang:{name}_total Counter.",
            f"# TYPE sglang:{name}_total counter",
            f'sglang:{name}_total{{{tok},is_streaming="true"}} {rate * t}',
        ]
    with Metrics.lock:  # this scrape is active too, as in SGLang
        active = {"/metrics": 1, **Metrics.active}
    lines += ["# HELP sglang:http_requests_active Active.", "# TYPE sglang:http_requests_active gauge"]
    for path, count in active.items():
        method = "GET" if path == "/metrics" else "POST"
        lines.append(f'sglang:http_requests_active{{endpoint="{path}",method="{method}"}} {float(count)}')
    lines += _histogram(
        "sglang:time_to_first_token_seconds",
        tok + ',is_streaming="true"',
        TTFT_BUCKETS,
        TTFT_SHARES,
        k["req_s"] * t,
        0.3,
    )
    lines += _histogram(
        "sglang:inter_token_latency_seconds", tok, ITL_BUCKETS, ITL_SHARES, k["gen_tok_s"] * t, 0.012
    )
    return "\n".join(lines) + "\n"


class Rank0Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *a: object) -> None:
        log(f'{self.client_address[0]} - "{self.requestline}" {a[1] if len(a) > 1 else ""}')

    def reply(self, code: int, body: object, ctype: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        args, path = State.args, self.path.split("?")[0]
        if not authorized(self, path):
            self.reply(401, {"error": "Unauthorized"})
        elif path in ("/health", "/health_generate", "/ready"):
            self.reply(200 if State.ready else 503, "" if State.ready else "not ready", "text/plain")
        elif path == "/v1/models":
            name = served_name(args)
            self.reply(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": name,
                            "object": "model",
                            "owned_by": "sglang",
                            "root": name,
                            "max_model_len": 32768,
                        }
                    ],
                },
            )
        elif path in ("/server_info", "/get_server_info"):
            self.reply(
                200,
                {
                    "argv": sys.argv,
                    "api_key": args.api_key,  # as SGLang 0.5.23: every setting, its keys included
                    "admin_api_key": args.admin_api_key,
                    "model_path": args.model_path,
                    "served_model_name": served_name(args),
                    "tp_size": args.tp,
                    "nnodes": args.nnodes,
                    "node_rank": args.node_rank,
                    "dist_init_addr": args.dist_init_addr,
                    "version": "standin",
                    "standin_replica": replica_name(),
                },
            )
        elif path in ("/model_info", "/get_model_info"):  # sglang-router asks /model_info
            self.reply(200, {"model_path": args.model_path, "is_generation": True})
        elif path == "/metrics" and args.enable_metrics:
            self.reply(200, metrics_text(served_name(args)), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self.reply(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # counted from arrival to the last byte, as SGLang's middleware does
        path = self.path.split("?")[0]
        with Metrics.lock:
            Metrics.active[path] = Metrics.active.get(path, 0) + 1
        try:
            self._post()
        finally:
            with Metrics.lock:
                Metrics.active[path] -= 1

    def _post(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            req = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            return self.reply(400, {"error": "bad json"})
        path = self.path.split("?")[0]
        if not authorized(self, path):
            return self.reply(401, {"error": "Unauthorized"})
        if path not in ("/v1/chat/completions", "/v1/completions", "/generate"):
            return self.reply(404, {"detail": "Not Found"})
        if not State.ready:
            return self.reply(503, {"error": "server not ready"})
        stall = os.environ.get("STANDIN_STALL_AFTER")
        if stall and time.monotonic() - State.ready_at > float(stall):
            log("STANDIN: generation stalled (STANDIN_STALL_AFTER)")
            return self.reply(500, {"error": "stand-in engine stalled"})
        text = f"Hello from the sparkctl stand-in engine (replica={replica_name()})."
        delay = float(os.environ.get("STANDIN_GEN_DELAY", "0"))
        if delay:  # lets a test see a request in flight (the access log line comes when it ends)
            log(f"STANDIN_GEN begin {path}")
        usage = {"prompt_tokens": 8, "completion_tokens": 9, "total_tokens": 17}
        created, rid = int(time.time()), f"standin-{time.time_ns()}"
        model = req.get("model") or served_name(State.args)
        if path == "/generate":
            time.sleep(delay)
            return self.reply(200, {"text": text, "meta_info": {"completion_tokens": 9}})
        chat = path == "/v1/chat/completions"
        if req.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            words = text.split(" ")
            for i, word in enumerate(words):
                # a token at a time, like a real engine (sent all at once, a stream is a burst)
                time.sleep(delay / len(words) if delay else STREAM_GAP_S)
                piece = word if i == 0 else " " + word
                delta = {"index": 0, "delta": {"role": "assistant", "content": piece}, "finish_reason": None}
                if not chat:
                    delta = {"index": 0, "text": piece, "finish_reason": None}
                chunk = {
                    "id": rid,
                    "object": "chat.completion.chunk" if chat else "text_completion",
                    "created": created,
                    "model": model,
                    "choices": [delta],
                }
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            end = {
                "id": rid,
                "object": "chat.completion.chunk" if chat else "text_completion",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": {}, "text": "", "finish_reason": "stop"}],
                "usage": usage,
            }
            self.wfile.write(f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n".encode())
            self.close_connection = True
            return None
        time.sleep(delay)
        choice = (
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            if chat
            else {"index": 0, "text": text, "finish_reason": "stop"}
        )
        return self.reply(
            200,
            {
                "id": rid,
                "object": "chat.completion" if chat else "text_completion",
                "created": created,
                "model": model,
                "choices": [choice],
                "usage": usage,
            },
        )


class DummyHealthHandler(Rank0Handler):
    """SGLang ranks >= 1 run a dummy server: /health, /health_generate, /ping always 200."""

    def do_GET(self) -> None:
        if self.path.split("?")[0] in ("/health", "/health_generate", "/ping"):
            self.reply(200, "", "text/plain")
        else:
            self.reply(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        self.reply(404, {"detail": "Not Found"})


class QuietResetServer(ThreadingHTTPServer):
    """A peer's reset is no error to log, as uvicorn (SGLang's and vLLM's server) treats it: the
    gateway closes idle upstream connections with a reset, and a traceback per close would push
    the engine's own lines out of the log tail `up` shows."""

    def handle_error(self, request, client_address) -> None:  # noqa: ANN001 - socketserver's API
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def serve_http(args: argparse.Namespace, handler: type) -> None:
    httpd = QuietResetServer((args.host, args.port), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    log(f"INFO:     Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")


def allocate(spec: str, rank: int) -> None:
    """STANDIN_ALLOC: grow the process's resident memory in steps until killed (or max_mb)."""
    step_mb, every, top_mb = (float(x) for x in spec.split(","))
    while not os.path.exists("/tmp/standin-alloc-go"):
        time.sleep(0.05)
    held: list[bytes] = []
    total = 0.0
    while total + step_mb <= top_mb:
        held.append(b"\x01" * int(step_mb * (1 << 20)))  # every page written: resident, not reserved
        total += step_mb
        log(f"STANDIN_ALLOC total={total:.0f} MiB", rank)
        time.sleep(every)
    while True:
        time.sleep(3600)


def hold_shm(rank: int) -> None:
    mb, name = int(os.environ["STANDIN_SHM_MB"]), os.environ.get("STANDIN_SHM_NAME", "standin-shm")
    with open(f"/dev/shm/{name}", "wb") as fh:
        for _ in range(mb):
            fh.write(b"\x02" * (1 << 20))
    log(f"STANDIN_SHM wrote {mb} MiB to /dev/shm/{name}", rank)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and not argv[0].startswith("-"):  # SGLang's parser takes flags only, as vLLM's takes MODEL
        sys.stderr.write(f"sglang.launch_server: error: unrecognized arguments: {argv[0]}\n")
        return 2  # e.g. the launcher twice: an image ENTRYPOINT that is the launcher, plus the argv
    args, unknown = parse(argv)
    State.args = args
    rank = args.node_rank
    on_term = os.environ.get("STANDIN_SIGTERM", "exit")
    if on_term == "exit":
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    elif on_term == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    record(argv)
    log(
        f"server_args=ServerArgs(model_path={args.model_path!r}, tp_size={args.tp}, nnodes={args.nnodes}, "
        f"node_rank={rank}, dist_init_addr={args.dist_init_addr!r}, host={args.host!r}, port={args.port}, "
        f"ignored={len(unknown)} flags)"
    )
    maybe_fail("start", rank)
    maybe_fail("rendezvous", rank)
    rendezvous(args)
    launch_gate(args)
    late_bind = os.environ.get("STANDIN_BIND_AFTER_LOAD") == "1"  # as SGLang 0.5.23 does
    if rank == 0 and not late_bind:
        serve_http(args, Rank0Handler)
    log("Load weight begin. avail mem=119.50 GB", rank)
    maybe_fail("load", rank)
    if os.environ.get("STANDIN_SHM_MB"):
        hold_shm(rank)
    time.sleep(float(os.environ.get("STANDIN_DELAY_LOAD", "0")))
    log(
        "Load weight end. type=StandinForCausalLM, dtype=torch.bfloat16, avail mem=60.25 GB, mem usage=59.25 GB.",
        rank,
    )
    if rank == 0 and late_bind:
        serve_http(args, Rank0Handler)  # OSError (address in use) when another process holds it
    log("KV Cache is allocated. #tokens: 1000000, K size: 10.00 GB, V size: 10.00 GB", rank)
    log("Capture cuda graph begin. This can take up to several minutes. avail mem=38.00 GB", rank)
    maybe_fail("warmup", rank)
    if os.environ.get("STANDIN_NEVER_READY") == "1":
        log("STANDIN: never becoming ready (STANDIN_NEVER_READY=1)", rank)
        while True:
            time.sleep(3600)
    log("Capture cuda graph end. Time elapsed: 0.01 s. mem usage=0.50 GB. avail mem=37.50 GB.", rank)
    if rank == 0:
        State.ready_at = time.monotonic()
        State.ready = True
        log("The server is fired up and ready to roll!")
    else:
        serve_http(args, DummyHealthHandler)
        log(f"Dummy health check server started on {args.host}:{args.port} (rank {rank})", rank)
    if os.environ.get("STANDIN_ALLOC"):
        threading.Thread(target=allocate, args=(os.environ["STANDIN_ALLOC"], rank), daemon=True).start()
    if "serve" in fail_spec(rank):
        time.sleep(float(os.environ.get("STANDIN_FAIL_AFTER", "3")))
        log("STANDIN: injected failure at phase serve", rank)
        log("RuntimeError: stand-in engine crashed while serving (STANDIN_FAIL_AT)", rank)
        os._exit(1)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
