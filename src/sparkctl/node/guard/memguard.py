"""The unified-memory guard: runs ON a node (python3 stdlib only; imports nothing of sparkctl).

sparkctl sends this program (with flock.py and memsense.py) on stdin to a small boot that runs it
only when its sha256 is the one sparkctl named (BOOT below: no copy on disk a container could
rewrite); `start CONFIG_JSON` spawns `run CONFIG` the same way, in a session of its own (no
terminal, output to ~/.local/state/sparkctl/guard/<cluster>.log): it lives on the node whatever
the controller does, and exits by itself once no container of its cluster has run there for
`idle_exit_s`. One guard per cluster and node; an flock on <cluster>.lock is its liveness.

Every `interval_s` (`fast_interval_s` while MemAvailable is under twice the floor or falls towards
it within `horizon_s`) it reads /proc/meminfo and /proc/pressure/memory; a kernel line on
/dev/kmsg (only lines logged after the guard started) wakes it at once. It trips when
  - MemAvailable < min_available;
  - memory PSI "full" (every runnable task stalled on memory) >= psi_full_pct of psi_window_s;
  - a kernel record (facility 0; user-space writes to /dev/kmsg never are) matches one of
    kernel_patterns AT THE START of its message (NVRM out of memory / NV_ERR_NO_MEMORY, Xid), the
    message not starting with a task's name (`comm[pid]: segfault ...`: any process names itself),
    and MemAvailable is under twice min_available (a driver line alone never kills),
and then SIGKILLs at once the running containers labelled sparkctl.cluster=<cluster> (not the
router nor a gateway: they hold no model memory): each container's init by pid first (checked by
its start time: no Docker round trip on a box under pressure; the kernel then kills the whole pid
namespace), then through the Docker API for any it could not signal. Nothing else is ever signalled. Each trip is one JSON line in
<cluster>.trips.jsonl (numbers, the kernel line, what was killed, how long it took); <cluster>.json
holds the latest sample.

Ops: start CONFIG | run CONFIG | stop CLUSTER | status CLUSTER
"""

import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import time

from ..flock import kernel_holder, probe, take, write_record  # node: strip
from .memsense import (  # node: strip
    Targets,
    Watch,
    gib,
    kernel_match,
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
    """The guard's directory (0700): its lock, state, trips and log; never its code (below)."""
    return os.path.join(os.path.expanduser("~"), ".local", "state", "sparkctl", "guard")


# The program never runs from a file a container could rewrite: sparkctl sends it on stdin to BOOT
# with its sha256 (`python3 -S -c BOOT DIGEST OP ARG`), BOOT runs the bytes only when they match,
# and op_start starts the detached `run` the same way with the same bytes. Run as a plain file
# (tests), the program has no DIGEST or SOURCE and cannot start a guard.
BOOT = """import sys,hashlib
d=sys.argv.pop(1);s=sys.stdin.buffer.read()
if hashlib.sha256(s).hexdigest()!=d:sys.exit('sparkctl guard: the program does not match its digest')
exec(compile(s,'sparkctl-guard','exec'),{'__name__':'__main__','__digest__':d,'__source__':s})"""
DIGEST = globals().get("__digest__") or "unverified"
SOURCE = globals().get("__source__")


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
        self.ignored = None  # the last kernel line that matched while memory was not low
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
        for at, facility, text in read_kmsg(self.kmsg):
            pattern = kernel_match(self.patterns, facility, text)
            if pattern is None:
                continue
            now = time.monotonic()
            # A driver line alone never kills: it acts with memory also low (under twice the floor).
            avail, floor = meminfo().get("MemAvailable", 0), self.cfg["min_available"]
            if avail >= 2 * floor:
                self.ignored = {"line": text[:300], "at": time.time(), "mem_available": avail}
                print(f"{time.strftime('%H:%M:%S')} kernel line, memory not low ({gib(avail)}): {text[:200]}")
                continue
            if not self.targets.known:
                self.targets.refresh()
            if self.targets.known:
                age = round(max(0.0, now - at) * 1000, 1)
                cause = {
                    "kind": "kernel",
                    "reason": f"kernel: {text[:300]} (MemAvailable {gib(avail)})",
                    "line": text,
                    "pattern": pattern,
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
            "kernel_ignored": self.ignored,
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
    return probe(paths(cluster)["lock"])


def op_run(cfg):
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # a poke before the guard is up must not kill it
    fd = os.open(paths(cfg["cluster"])["lock"], os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    if not take(fd):
        return 0  # another guard of this cluster runs here
    record = {"pid": os.getpid(), "since": time.time(), "digest": cfg_digest(cfg), "program": program_id()}
    write_record(fd, record)
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
    return DIGEST[:16]


def op_stop(cluster, wait=10.0):
    """SIGTERM (then SIGKILL) the process the kernel says holds the lock: the record's pid is only
    believed when it is that process (the file is data; the kernel's lock table is not)."""
    info = running(cluster)
    pid = kernel_holder(paths(cluster)["lock"]) if info is not None else None
    if pid is not None and int((info or {}).get("pid") or 0) != pid:
        return {"stopped": None, "error": f"the lock's record names pid {info.get('pid')}, the kernel {pid}"}
    pid = pid or 0
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
    if SOURCE is None:
        return {"pid": None, "started": False, "error": "the guard program was not started by its boot"}
    with open(os.path.join(here(), cfg["cluster"] + ".log"), "ab") as log:
        proc = subprocess.Popen(  # noqa: S603 - this very program, the same verified bytes
            [sys.executable, "-S", "-c", BOOT, DIGEST, "run", json.dumps(cfg)],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    proc.stdin.write(SOURCE)
    proc.stdin.close()
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
    os.makedirs(here(), 0o700, exist_ok=True)  # also for `run` from a unit at boot
    if op == "run":
        return op_run(json.loads(arg))
    for old in os.listdir(here()):  # program files of versions before the boot: never run again
        if old.startswith("memguard-") and old.endswith(".py"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(here(), old))
    out = {
        "start": lambda: op_start(json.loads(arg)),
        "stop": lambda: op_stop(arg),
        "status": lambda: op_status(arg),
    }
    print(json.dumps(out[op]()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
