"""The unified-memory guard: runs ON a node (python3 stdlib only; imports nothing of sparkctl).

sparkctl writes this file into the node user's ~/.local/state/sparkctl/guard/ (0700) as
memguard-<digest>.py and runs `python3 -S FILE start CONFIG_JSON`, which spawns `FILE run CONFIG`
in a session of its own (no terminal, output to <cluster>.log): it lives on the node whatever
the controller does, and exits by itself once no container of its cluster has run there for
`idle_exit_s`. One guard per cluster and node; an flock on <cluster>.lock is its liveness.

Every `interval_s` (`fast_interval_s` while MemAvailable is under twice the floor or falls towards
it within `horizon_s`) it reads /proc/meminfo and /proc/pressure/memory; a kernel line on
/dev/kmsg (only lines logged after the guard started) wakes it at once. It trips when
  - MemAvailable < min_available;
  - memory PSI "full" (every runnable task stalled on memory) >= psi_full_pct of psi_window_s;
  - a kernel line matches one of kernel_patterns (NVRM out of memory / NV_ERR_NO_MEMORY, Xid),
and then SIGKILLs at once the running containers labelled sparkctl.cluster=<cluster> (not the
router): each container's init by pid first (checked by its start time: no Docker round trip on
a box under pressure; the kernel then kills the whole pid namespace), then through the Docker
API for any it could not signal. Nothing else is ever signalled. Each trip is one JSON line in
<cluster>.trips.jsonl (numbers, the kernel line, what was killed, how long it took); <cluster>.json
holds the latest sample.

Ops: start CONFIG | run CONFIG | stop CLUSTER | status CLUSTER
"""

import contextlib
import fcntl
import json
import os
import re
import select
import signal
import subprocess
import sys
import time

from .memsense import (  # node: strip
    Targets,
    Watch,
    kill_api,
    kill_pids,
    meminfo,
    open_kmsg,
    psi_full_total,
    read_kmsg,
    read_text,
    wait_gone,
)

# How often the list of containers to guard is read from Docker: every 2 s for a minute after the
# guard starts or is poked (SIGUSR1: sparkctl is about to start ranks here) and while it guards
# nothing; every 10 s once it guards a steady set (each listing costs Docker and the guard a few
# wake-ups: docs/memory.md#measured).
REFRESH_S, REFRESH_STEADY_S, BUSY_S = 2.0, 10.0, 60.0
STATE_EVERY_S = 5.0


def here():
    return os.path.dirname(os.path.abspath(__file__))


def paths(cluster):
    base = os.path.join(here(), cluster)
    return {k: base + ext for k, ext in (("lock", ".lock"), ("state", ".json"), ("trips", ".trips.jsonl"))}


# ------------------------------------------------------------------------------ the loop
class Guard:
    def __init__(self, cfg):
        self.cfg = cfg
        self.p = paths(cfg["cluster"])
        self.watch = Watch(cfg)
        self.targets = Targets(cfg["cluster"])
        self.patterns = [re.compile(x) for x in cfg["kernel_patterns"]]
        self.kmsg, self.kmsg_note = open_kmsg()
        self.trips = 0
        self.mem = {}
        self.since = time.time()
        self.busy_until = time.monotonic() + BUSY_S
        self.poked = False

    def poke(self, *_):
        self.busy_until = time.monotonic() + BUSY_S
        self.poked = True

    def trip(self, cause, detected):
        """Kill the group by pid, wait until those inits are gone, record why at once (the
        supervisor reads it when it sees the ranks dead); then the Docker API for what the pids
        could not reach or what started since the last listing, as a record of its own."""
        killed = kill_pids(self.targets)
        by_pid = [k for k in killed if k["how"] != "api"]
        if by_pid:
            self.record(cause, by_pid, detected, time.monotonic(), wait_gone(by_pid, 2.0))
        api = [k for k in killed if k["how"] == "api"] + kill_api(self.targets, killed)
        if api:
            sent = time.monotonic()
            self.record(
                {**cause, "reason": cause["reason"] + " (killed through Docker)"},
                api,
                detected,
                sent,
                wait_gone(api, 10.0),
            )

    def record(self, cause, killed, detected, sent, gone_ok):
        mem = self.mem
        rec = {
            "at": time.time(),
            "cluster": self.cfg["cluster"],
            **cause,
            "mem_available": mem.get("MemAvailable"),
            "mem_total": mem.get("MemTotal"),
            "min_available": self.cfg["min_available"],
            "falling_bytes_s": round(self.watch.rate()) if self.watch.hist else None,
            "psi_full_pct": self.watch.psi_share() if self.watch.hist else None,
            "killed": [{k: v for k, v in x.items() if k != "start"} for x in killed],
            "kill_ms": round((sent - detected) * 1000, 1),
            "gone_ms": round((time.monotonic() - detected) * 1000, 1),
            "gone": gone_ok,
        }
        self.trips += 1
        fd = os.open(self.p["trips"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a") as fh:
            fh.write(json.dumps(rec) + "\n")
        self.write_state()
        print(f"{time.strftime('%H:%M:%S')} tripped: {rec['reason']}; killed {len(killed)}", flush=True)

    def sample(self):
        now = time.monotonic()
        self.mem = meminfo()
        cause = self.watch.feed(now, self.mem.get("MemAvailable", 0), psi_full_total())
        if cause is not None and self.targets.known:
            self.trip(cause, now)

    def kernel(self):
        for at, text in read_kmsg(self.kmsg):
            if any(p.search(text) for p in self.patterns):
                now = time.monotonic()
                if not self.targets.known:
                    self.targets.refresh()
                if self.targets.known:
                    age = round(max(0.0, now - at) * 1000, 1)
                    cause = {
                        "kind": "kernel",
                        "reason": "kernel: " + text[:300],
                        "line": text,
                        "line_age_ms": age,
                    }
                    self.trip(cause, now)

    def write_state(self):
        state = {
            "pid": os.getpid(),
            "since": self.since,
            "at": time.time(),
            "config": self.cfg,
            "mem_available": self.mem.get("MemAvailable"),
            "mem_total": self.mem.get("MemTotal"),
            "psi_full_pct": self.watch.psi_share() if self.watch.hist else None,
            "watching": sorted(i["name"] for i in self.targets.known.values()),
            "kernel_log": self.kmsg_note or "watched",
            "docker": self.targets.error or "ok",
            "trips": self.trips,
        }
        tmp = f"{self.p['state']}.{os.getpid()}.part"
        with open(tmp, "w") as fh:
            json.dump(state, fh)
        os.replace(tmp, self.p["state"])

    def loop(self, stop):
        poller = select.poll()
        if self.kmsg is not None:
            poller.register(self.kmsg, select.POLLIN)
        next_refresh = next_state = 0.0
        seen = time.monotonic()
        while not stop:
            now = time.monotonic()
            if now >= next_refresh or self.poked:
                self.poked = False
                self.targets.refresh()
                steady = self.targets.known and now >= self.busy_until
                next_refresh = now + (REFRESH_STEADY_S if steady else REFRESH_S)
                if self.targets.known:
                    seen = now
                elif now - seen > self.cfg["idle_exit_s"]:
                    return "no container of the cluster ran here for %ds" % self.cfg["idle_exit_s"]  # noqa: UP031
            self.sample()
            if now >= next_state:
                self.write_state()
                next_state = now + STATE_EVERY_S
            if poller.poll(self.watch.next_wait() * 1000) and self.kmsg is not None:
                self.kernel()
        return "stopped"


# ------------------------------------------------------------------------------ ops
def running(cluster):
    """The live guard's lock record ({pid, since, digest, program}), or None."""
    try:
        fd = os.open(paths(cluster)["lock"], os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        with contextlib.suppress(OSError, ValueError):
            return json.loads(os.pread(fd, 8192, 0) or b"{}")
        return {}
    finally:
        os.close(fd)
    return None


def take_lock(fd, wait_s=1.0):
    """LOCK_EX on the guard's lock file; False when another guard holds it. `running()` probes
    with LOCK_SH for microseconds, and op_start probes every 10 ms while this guard starts: one
    probe at the wrong moment made a lone new guard exit as if another ran (seen in CI). A live
    guard holds LOCK_EX for its whole life, so a lock still taken after `wait_s` is one."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)


def op_run(cfg):
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # a poke before the guard is up must not kill it
    fd = os.open(paths(cfg["cluster"])["lock"], os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    if not take_lock(fd):
        return 0  # another guard of this cluster runs here
    record = {"pid": os.getpid(), "since": time.time(), "digest": cfg_digest(cfg), "program": program_id()}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode(), 0)
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(1))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    guard = Guard(cfg)
    signal.signal(signal.SIGUSR1, guard.poke)
    print(
        f"{time.strftime('%H:%M:%S')} guarding {cfg['cluster']}: {guard.kmsg_note or 'kernel log watched'}",
        flush=True,
    )
    why = guard.loop(stop)
    guard.write_state()
    print(f"{time.strftime('%H:%M:%S')} exiting: {why}", flush=True)
    return 0


def cfg_digest(cfg):
    import hashlib

    return hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]


def program_id():
    return os.path.basename(os.path.abspath(__file__))


def op_stop(cluster, wait=10.0):
    info = running(cluster)
    pid = int((info or {}).get("pid") or 0)
    if pid > 0:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + wait
        while running(cluster) is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        if running(cluster) is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return {"stopped": pid or None}


def op_start(cfg):
    info = running(cfg["cluster"])
    if info is not None:
        if info.get("digest") == cfg_digest(cfg) and info.get("program") == program_id():
            pid = int(info.get("pid") or 0)
            if pid > 0:  # ranks start next: list containers often again
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGUSR1)
            return {"pid": info.get("pid"), "started": False}
        op_stop(cfg["cluster"])
    with open(os.path.join(here(), cfg["cluster"] + ".log"), "ab") as log:
        proc = subprocess.Popen(  # noqa: S603 - this very program
            [sys.executable, "-S", os.path.abspath(__file__), "run", json.dumps(cfg)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and proc.poll() is None:
        if (running(cfg["cluster"]) or {}).get("pid") == proc.pid:
            return {"pid": proc.pid, "started": True}
        time.sleep(0.01)
    return {"pid": None, "started": False, "error": f"the guard exited at once (code {proc.poll()})"}


def op_status(cluster, last=20):
    p = paths(cluster)
    state, trips = None, []
    with contextlib.suppress(OSError, ValueError):
        state = json.loads(read_text(p["state"]))
    with contextlib.suppress(OSError):
        for line in read_text(p["trips"]).splitlines()[-last:]:
            with contextlib.suppress(ValueError):
                trips.append(json.loads(line))
    return {"running": running(cluster), "state": state, "trips": trips}


def main(argv):
    op, arg = argv[1], argv[2]
    if op == "run":
        return op_run(json.loads(arg))
    os.makedirs(here(), 0o700, exist_ok=True)
    out = {
        "start": lambda: op_start(json.loads(arg)),
        "stop": lambda: op_stop(arg),
        "status": lambda: op_status(arg),
    }
    print(json.dumps(out[op]()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
