"""Measure how the real sglang-router treats its workers, on a real 2-node lab (docs/topology.md).

    python bench/router_facts.py [--rounds 3] [--policy round_robin]   (root, repo root)

The router (`python3 -m sglang_router.launch_router` in the serving test image, a container on
spark1) in front of one stand-in replica per node, over the fabric. Each figure is printed with the
bound it is compared against (a ratio), medians of --rounds where timed:

  (1) the worker routes the router calls (from the stand-ins' access logs);
  (2) SIGKILLed replica -> listed unhealthy, for --health-failure-threshold N = 1, 2, 3 at
      --health-check-interval-secs 1; bound N x interval; failed client requests meanwhile;
  (3) the replica back (container restarted) -> listed healthy, --health-success-threshold 1 and 2;
  (4) a replica killed with a request in flight: non-streaming (retried elsewhere?) and streaming;
  (5) DELETE /workers/<id> with a request in flight on that replica: gone from the listing after,
      the in-flight request's result and latency against its own generation time; POST /workers
      back: listed healthy after, first request routed to it after;
  (6) a replica answering HTTP 500: retried elsewhere? when does the router stop sending to it?
  (7) the router started before a replica is up: time from the replica ready to listed healthy,
      with --worker-startup-check-interval 1 and the default.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.testbed.lab import Lab  # noqa: E402
from tests.testbed.routerlab import ENGINE_PORT, RouterLab, chat, replica_of, wait_for  # noqa: E402

from sparkctl.clients.router import RouterClient  # noqa: E402

NODES = ("spark1", "spark2")
GEN_S = 2.0  # generation time of the stand-in for the in-flight probes
POLICY = "round_robin"  # --policy


def flags(failure: int = 2, success: int = 1, startup_check: int | None = 1) -> list[str]:
    argv = ["--health-check-interval-secs", "1", "--health-failure-threshold", str(failure)]
    argv += ["--health-success-threshold", str(success)]
    if startup_check is not None:  # else the router's default (30 s)
        argv += ["--worker-startup-check-interval", str(startup_check)]
    return argv


def listed(client: RouterClient, url: str, healthy: bool) -> bool:
    return any(w.url == url and w.healthy is healthy for w in client.workers())


def poll_until(cond, timeout: float = 60, interval: float = 0.02) -> float:
    """Seconds until cond() holds, polled every 20 ms."""
    start = time.monotonic()
    wait_for("condition", cond, timeout=timeout, interval=interval)
    return time.monotonic() - start


class Load:
    """A steady client through the router (one request at a time)."""

    def __init__(self, base: str) -> None:
        self.base, self.results, self.stop = base, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():  # distinct prompts, so cache_aware spreads them too
            self.results.append(chat(self.base, prompt=f"question {len(self.results)}"))

    def finish(self) -> tuple[int, list[tuple[int, str]]]:
        self.stop.set()
        self.thread.join(60)
        return len(self.results), [r for r in self.results if r[0] != 200]


def kill_and_back(rl: RouterLab, rounds: int, failure: int, success: int, port: int) -> dict:
    urls = [rl.engine_url(n) for n in NODES]
    client = rl.start_router(urls, port=port, flags=flags(failure, success), policy=POLICY)
    dead, name = urls[1], rl.name(f"engine-spark2-{ENGINE_PORT}")
    down, up, failed, sent = [], [], [], 0
    for _ in range(rounds):
        n, f, gone = one_kill(rl, client, port, dead, name)
        sent, failed = sent + n, failed + f
        down.append(gone)
        up.append(restart(rl, client, dead, name))
    rl.lab.docker("spark1").containers.get(rl.name(f"router-{port}")).remove(force=True)
    return {"down": down, "up": up, "sent": sent, "failed": failed}


def one_kill(rl: RouterLab, client: RouterClient, port: int, url: str, name: str) -> tuple[int, list, float]:
    """SIGKILL the replica under a steady load; (requests sent, failed, seconds to unhealthy)."""
    load = Load(rl.router_base(port))
    wait_for("load", lambda: len(load.results) >= 3)
    rl.lab.kill_container("spark2", name)
    gone = poll_until(lambda: listed(client, url, False))
    return (*load.finish(), gone)


def restart(rl: RouterLab, client: RouterClient, url: str, name: str) -> float:
    """Start the killed replica again; seconds from its ready line to listed healthy."""
    container = rl.lab.docker("spark2").containers.get(name)
    starts = container.logs().decode().count("fired up")
    container.start()
    wait_for("engine ready", lambda: container.logs().decode().count("fired up") > starts, interval=0.02)
    return poll_until(lambda: listed(client, url, True))


def in_flight_kill(rl: RouterLab, port: int, stream: bool) -> list[tuple[int, str, float]]:
    """Kill spark2's replica while a request runs on each replica; (status, answer, seconds) each."""
    for n in NODES:
        rl.start_engine(n, port=ENGINE_PORT + 1, STANDIN_GEN_DELAY=str(GEN_S))
    urls = [rl.engine_url(n, ENGINE_PORT + 1) for n in NODES]
    rl.start_router(urls, port=port, policy=POLICY)

    def timed(prompt: str) -> tuple[int, str, float]:
        start = time.monotonic()
        return (*chat(rl.router_base(port), 30, stream, prompt), time.monotonic() - start)

    with ThreadPoolExecutor(2) as pool:
        futs = [pool.submit(timed, p) for p in ("alpha", "beta")]  # distinct: cache_aware spreads them
        wait_for("in flight", lambda: all(rl.in_flight(n, ENGINE_PORT + 1) for n in NODES), interval=0.05)
        rl.lab.kill_container("spark2", rl.name(f"engine-spark2-{ENGINE_PORT + 1}"))
        results = [f.result() for f in futs]
    rl.cleanup()
    return results


def delete_in_flight(rl: RouterLab, port: int) -> dict:
    for n in NODES:
        rl.start_engine(n, port=ENGINE_PORT + 2, STANDIN_GEN_DELAY=str(GEN_S))
    urls = [rl.engine_url(n, ENGINE_PORT + 2) for n in NODES]
    client = rl.start_router(urls, port=port, policy=POLICY)
    with ThreadPoolExecutor(2) as pool:
        start = time.monotonic()
        futs = [pool.submit(chat, rl.router_base(port), 30, False, p) for p in ("alpha", "beta")]
        wait_for("in flight", lambda: all(rl.in_flight(n, ENGINE_PORT + 2) for n in NODES), interval=0.05)
        t = time.monotonic()
        client.remove(urls[1])
        poll_until(lambda: all(w.url != urls[1] for w in client.workers()))
        gone = time.monotonic() - t
        pending = sum(1 for f in futs if not f.done())
        answers = [f.result() for f in futs]
        took = time.monotonic() - start
    after = Counter(replica_of(chat(rl.router_base(port))[1]) for _ in range(4))
    client.add(urls[1])
    readd = poll_until(lambda: listed(client, urls[1], True))
    routed = next(  # distinct prompts (cache_aware would keep one prompt on its replica)
        (
            i
            for i in range(1, 21)
            if replica_of(chat(rl.router_base(port), prompt=f"next {i}")[1]) == "spark2"
        ),
        None,
    )
    rl.cleanup()
    return {
        "readd_s": readd,
        "routed_s": routed,
        "gone_s": gone,
        "pending": pending,
        "answers": answers,
        "took": took,
        "after": after,
    }


def failing_replica(rl: RouterLab, port: int) -> dict:
    rl.start_engine("spark1", port=ENGINE_PORT + 3)
    rl.start_engine("spark2", port=ENGINE_PORT + 3, STANDIN_STALL_AFTER="0")
    urls = [rl.engine_url(n, ENGINE_PORT + 3) for n in NODES]
    client = rl.start_router(urls, port=port, policy=POLICY)
    answers = [chat(rl.router_base(port)) for _ in range(40)]
    logs = rl.lab.docker("spark2").containers.get(rl.name(f"engine-spark2-{ENGINE_PORT + 3}")).logs().decode()
    got = logs.count("generation stalled")
    healthy = listed(client, urls[1], True)
    rl.cleanup()
    return {
        "ok": sum(1 for c, _ in answers if c == 200),
        "sent": 40,
        "spark2_got": got,
        "listed_healthy": healthy,
    }


def late_replica(rl: RouterLab, port: int, startup_check: int | None, load_s: float) -> dict:
    """spark2's replica starts after the router and loads for load_s (its /health answers 503)."""
    rl.start_engine("spark1", port=ENGINE_PORT + 4)
    urls = [rl.engine_url(n, ENGINE_PORT + 4) for n in NODES]
    client = rl.start_router(
        urls, port=port, wait_healthy=False, flags=flags(startup_check=startup_check), policy=POLICY
    )
    wait_for("spark1 healthy", lambda: listed(client, urls[0], True))
    before = [w.url for w in client.workers()]
    ok = sum(1 for _ in range(4) if chat(rl.router_base(port))[0] == 200)
    name = rl.name(f"engine-spark2-{ENGINE_PORT + 4}")
    rl.start_engine("spark2", port=ENGINE_PORT + 4, STANDIN_DELAY_LOAD=str(load_s))
    wait_for(
        "engine ready", lambda: "fired up" in rl.lab.docker("spark2").containers.get(name).logs().decode()
    )
    took = poll_until(lambda: listed(client, urls[1], True), timeout=120)
    rl.cleanup()
    return {"listed_before": urls[1] in before, "ok_before": ok, "healthy_after_ready_s": took}


def routes(rl: RouterLab) -> Counter:
    seen: Counter = Counter()
    for n in NODES:
        for c in rl.lab.docker(n).containers.list(all=True, filters={"label": "sparkctl-test=router-lab"}):
            seen.update(re.findall(r'"(GET|POST) (/[^ ?"]*)', c.logs().decode()))
    return seen


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f}s (min {min(xs):.2f}, max {max(xs):.2f}, n={len(xs)})"


def main() -> int:
    global POLICY
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--policy", default="round_robin")
    args = ap.parse_args()
    POLICY = args.policy
    with Lab(nodes=2) as lab:
        lab.install_engine_image()
        rl = RouterLab(lab, tag=uuid.uuid4().hex[:6])
        try:
            for n in NODES:
                rl.start_engine(n)
            for i, (failure, success) in enumerate(((1, 1), (2, 1), (3, 2))):
                r = kill_and_back(rl, args.rounds, failure, success, 31200 + i)
                bound = failure * 1.0
                print(
                    f"(2) threshold {failure}: unhealthy after {med(r['down'])}; "
                    f"ratio to N x interval {statistics.median(r['down']) / bound:.2f}; "
                    f"{len(r['failed'])} of {r['sent']} client requests failed {r['failed'][:2]}"
                )
                print(f"(3) success threshold {success}: healthy again after {med(r['up'])}")
            print("(1) worker routes called:", dict(routes(rl)))
            rl.cleanup()
            for stream in (False, True):
                shown = [
                    f"HTTP {code} {replica_of(text)} {'[DONE]' if '[DONE]' in text else 'no [DONE]'} {took:.2f}s"
                    for code, text, took in in_flight_kill(rl, 31210 + stream, stream)
                ]
                what = "streams" if stream else "non-streaming requests"
                print(f"(4) two {what}, spark2 killed mid-way (gen {GEN_S}s): {shown}")
            d = delete_in_flight(rl, 31220)
            print(
                f"(5) DELETE: gone from listing after {d['gone_s']:.3f}s with {d['pending']} requests still "
                f"running; their answers {[(c, replica_of(t)) for c, t in d['answers']]} after {d['took']:.2f}s "
                f"(ratio to gen time {d['took'] / GEN_S:.2f}); next requests {dict(d['after'])}; "
                f"POST /workers back: healthy after {d['readd_s']:.2f}s, its first request is request {d['routed_s']} after that (None: not in 20)"
            )
            print("(6) replica answering 500:", failing_replica(rl, 31230))
            for i, (check, load_s) in enumerate(((1, 0), (None, 0), (1, 40), (None, 40))):
                got = late_replica(rl, 31240 + i, check, load_s)
                print(
                    f"(7) replica up after the router, loading {load_s}s, "
                    f"--worker-startup-check-interval {check or 'default'}: {got}"
                )
        finally:
            rl.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
