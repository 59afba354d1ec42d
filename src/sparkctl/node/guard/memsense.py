"""What the memory guard reads and does on a node (python3 stdlib only; imports nothing of sparkctl):
/proc/meminfo, memory PSI, /dev/kmsg, the Docker engine API over its unix socket, and the
decision (`Watch`, pure). memguard.py is the program; sparkctl ships the two as one file
(`sparkctl.lifecycle.guard.program`), dropping the import marked `# node: strip`."""

import contextlib
import json
import os
import re
import signal
import socket
import time

LABEL = "sparkctl.cluster"
ROLE = "sparkctl.role"
GIB = 1 << 30


def gib(n):
    return f"{n / GIB:.2f} GiB"


def read_text(path):
    with open(path) as fh:
        return fh.read()


def meminfo(text=None):
    """/proc/meminfo in bytes: {"MemAvailable": ..., "MemTotal": ...}."""
    out = {}
    for line in (read_text("/proc/meminfo") if text is None else text).splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return out


def psi_full_total(text=None):
    """Microseconds every non-idle task stalled on memory since boot (PSI "full"); None without PSI."""
    try:
        text = read_text("/proc/pressure/memory") if text is None else text
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("full "):
            for field in line.split()[1:]:
                key, _, value = field.partition("=")
                if key == "total" and value.isdigit():
                    return int(value)
    return None


class Watch:
    """The decision, pure: fed one sample at a time; says why to trip and how soon to look again."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.hist = []  # (monotonic s, MemAvailable bytes, PSI full total us or None)

    def feed(self, t, avail, psi):
        self.hist.append((t, avail, psi))
        keep = max(self.cfg["horizon_s"], self.cfg["psi_window_s"]) + 1
        while len(self.hist) > 2 and self.hist[0][0] < t - keep:
            self.hist.pop(0)
        floor = self.cfg["min_available"]
        if avail < floor:
            return {"kind": "memavailable", "reason": f"MemAvailable {gib(avail)} < {gib(floor)}"}
        share = self.psi_share()
        if share is not None and share >= self.cfg["psi_full_pct"]:
            window = self.cfg["psi_window_s"]
            return {"kind": "psi", "reason": f"memory PSI full {share:.0f}% of the last {window:g}s"}
        return None

    def rate(self):
        """Bytes per second MemAvailable fell over the last ~2 s (negative: it rose)."""
        t, avail, _ = self.hist[-1]
        old = next((h for h in self.hist if h[0] >= t - 2.0 and h[0] < t), None)
        return 0.0 if old is None else (old[1] - avail) / (t - old[0])

    def psi_share(self):
        t, _, psi = self.hist[-1]
        window = self.cfg["psi_window_s"]
        old = next((h for h in reversed(self.hist) if h[0] <= t - window and h[2] is not None), None)
        if psi is None or old is None or t <= old[0]:
            return None
        return 100.0 * (psi - old[2]) / ((t - old[0]) * 1e6)

    def next_wait(self):
        avail, floor = self.hist[-1][1], self.cfg["min_available"]
        rate = self.rate()
        close = avail < 2 * floor or (rate > 0 and avail - rate * self.cfg["horizon_s"] < floor)
        return self.cfg["fast_interval_s"] if close else self.cfg["interval_s"]


# ------------------------------------------------------------------------------ Docker, pids
def engine_socket():
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    return host[len("unix://") :] if host.startswith("unix://") else None


def docker(method, path, timeout=3.0):
    """(status, JSON body) of one Docker engine API call over its unix socket."""
    import http.client

    class Conn(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(engine_socket())

    conn = Conn("docker", timeout=timeout)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    with contextlib.suppress(ValueError):
        return resp.status, json.loads(body) if body else None
    return resp.status, None


def pid_start(pid):
    """A process's start time (clock ticks since boot): tells it from a later one with its pid."""
    try:
        return read_text(f"/proc/{pid}/stat").rsplit(") ", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def pid_gone(pid):
    try:
        return read_text(f"/proc/{pid}/stat").rsplit(") ", 1)[1].startswith(("Z", "X"))
    except (OSError, IndexError):
        return True


class Targets:
    """The running containers of the cluster on this node (router and gateways left out), with their init pid."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.known = {}  # id -> {"id", "name", "pid", "start"}
        self.killed = set()  # ids killed already (Docker may list them as running a moment longer)
        self.error = None

    def refresh(self):
        from urllib.parse import quote

        filters = json.dumps({"label": [f"{LABEL}={self.cluster}"], "status": ["running"]})
        try:
            status, items = docker("GET", "/containers/json?filters=" + quote(filters))
            if status != 200:
                raise OSError(f"Docker answered {status}")
            fresh = {}
            for c in items or []:
                labels = c.get("Labels") or {}
                if (
                    labels.get(LABEL) != self.cluster
                    or labels.get(ROLE) in ("router", "gateway")  # no model memory in either
                    or c["Id"] in self.killed
                ):
                    continue
                info = self.known.get(c["Id"]) or self._inspect(c)
                if info is not None:
                    fresh[c["Id"]] = info
            self.known, self.error = fresh, None
        except (OSError, ValueError, TypeError, KeyError) as exc:
            self.error = f"listing containers: {exc}"  # keep guarding the last known ones

    def _inspect(self, c):
        status, doc = docker("GET", f"/containers/{c['Id']}/json")
        pid = ((doc or {}).get("State") or {}).get("Pid") or 0
        if status != 200 or pid <= 0:
            return None
        name = (c.get("Names") or ["/" + c["Id"][:12]])[0].lstrip("/")
        return {"id": c["Id"], "name": name, "pid": pid, "start": pid_start(pid)}


def kill_pids(targets):
    """SIGKILL every guarded container's init by pid (checked by its start time): no Docker round
    trip. Returns [{name, id, pid, how}]: how is "pid", "gone", or "api" (the API must do it)."""
    killed = []
    for info in list(targets.known.values()):
        how = "api"
        if info["start"] is not None and pid_start(info["pid"]) == info["start"]:
            try:
                os.kill(info["pid"], signal.SIGKILL)
                how = "pid"
            except ProcessLookupError:
                how = "gone"
            except PermissionError:
                pass
        killed.append({**info, "how": how})
    targets.killed |= {k["id"] for k in killed}
    targets.known = {}
    return killed


def kill_api(targets, killed):
    """SIGKILL through the Docker API what the pid could not reach, and any container of the
    cluster that started since the last listing; returns those added."""
    for info in killed:
        if info["how"] == "api":
            with contextlib.suppress(OSError):
                docker("POST", f"/containers/{info['id']}/kill?signal=SIGKILL")
    targets.refresh()
    more = []
    for info in targets.known.values():
        with contextlib.suppress(OSError):
            docker("POST", f"/containers/{info['id']}/kill?signal=SIGKILL")
        more.append({**info, "how": "api"})
        targets.killed.add(info["id"])
    targets.known = {}
    return more


def wait_gone(killed, timeout):
    """Until every killed init is gone (or a zombie), at most `timeout` s; True when they all are."""
    deadline = time.monotonic() + timeout
    while not all(pid_gone(k["pid"]) for k in killed):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


# ------------------------------------------------------------------------------ kernel log
def open_kmsg():
    """(/dev/kmsg fd positioned at its end, None) or (None, why not)."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return None, f"kernel log unreadable ({exc.strerror}; needs root or CAP_SYSLOG)"
    os.lseek(fd, 0, os.SEEK_END)
    return fd, None


def read_kmsg(fd):
    """[(monotonic s the kernel logged it, facility, message)] of the records waiting on /dev/kmsg
    (`prio,seq,usec,flags;message`: the facility is prio >> 3; the kernel's own are 0, and a write
    to /dev/kmsg from user space never is: the kernel gives it 1, `user`, when it names none)."""
    out = []
    while True:
        try:
            raw = os.read(fd, 8192)
        except BlockingIOError:
            return out
        except BrokenPipeError:  # records overwritten before we read them: go on with the next
            continue
        if not raw:
            return out
        out.append(kmsg_record(raw.decode(errors="replace")))


def kmsg_record(text):
    head, _, message = text.partition(";")
    fields = head.split(",")
    prio = int(fields[0]) if fields[0].isdigit() else 8  # unparsable: not the kernel's (facility 1)
    at = int(fields[2]) / 1e6 if len(fields) > 2 and fields[2].isdigit() else time.monotonic()
    return at, prio >> 3, message.split("\n", 1)[0]


# Kernel lines that start with a task's name (comm: up to 15 bytes, set by the task itself with
# prctl(PR_SET_NAME)): `comm[pid]: segfault at ... in libx.so[...]` (and traps), `comm: page
# allocation failure: ...`, `comm invoked oom-killer: ...`. Their start is not the kernel's words,
# so no pattern may match them; and the default patterns fix more than 15 characters from the
# start, so a comm alone can never fill one.
TASK_LINE = re.compile(r"^[^\n]{0,15}(\[\d+\]|: page allocation failure| invoked oom-killer:)")


def kernel_match(patterns, facility, message):
    """The pattern a kernel message matches at its own start, or None: only facility 0 (the
    kernel's records), never a line that starts with a task's name."""
    if facility != 0 or TASK_LINE.match(message):
        return None
    return next((p.pattern for p in patterns if p.match(message)), None)
