"""Benchmark the unified-memory guard on a real 1-node lab: its reaction time and its overhead.

    python bench/memguard.py [--rounds 3] [--window 20]   (root, repo root)

The lab node shares this host's kernel and memory (docs/testbed.md), so the triggers are real:

  (1) kernel line -> group gone: the bench writes an `NVRM: ... NV_ERR_NO_MEMORY <marker>` line to
      /dev/kmsg at t0 and polls the rank's init pid (/proc, every 0.5 ms) until it is gone;
  (2) memory -> group gone: the stand-in allocates 128 MiB every 50 ms; the guard's floor is the
      MemAvailable at the round's start less 1.5 GiB; a bench thread reads MemAvailable every
      1 ms and notes when it first falls below the floor; until the init pid is gone;
      both with the guard's own record beside (detection -> signals sent -> gone);
  (3) overhead, --window s each, one after the other in the same run: the idle baseline (the least
      a 1 Hz watcher costs: python3 -S sleeping 1 s in a loop), the guard guarding a running rank
      in its first minute (containers listed every 2 s) and after it (1 Hz samples, a listing
      every 10 s), the guard near its floor (10 Hz), and earlyoom --dryrun (Debian's earlyoom, when
      installed; it acts on nothing in dry-run mode): per process CPU ms per second and
      wakeups per second (voluntary + involuntary context switches), and the node's dockerd CPU
      (the guard lists the cluster's containers every 2 s) against the baseline window.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.testbed.lab import Lab  # noqa: E402
from tests.testbed.profiles import seed_weights, write_lab_profile  # noqa: E402

from _cli import cli  # noqa: E402
from sparkctl.node.guard.memguard import BUSY_S  # noqa: E402

GIB = 1 << 30


def mem_available() -> int:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise SystemExit("no MemAvailable")


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].startswith(("Z", "X"))
    except (OSError, IndexError):
        return True


class NoTrip(Exception):
    pass


def wait_gone(pid: int, timeout: float = 30.0) -> float:
    deadline = time.monotonic() + timeout
    while not gone(pid):
        if time.monotonic() > deadline:
            raise NoTrip(f"pid {pid} still alive after {timeout}s")
        time.sleep(0.0005)
    return time.monotonic()


def usage(pid: int) -> tuple[float, int]:
    """(CPU seconds, context switches) of a process so far, all its threads: schedstat's run time
    in ns (clock ticks are 10 ms: too coarse for a process that wakes for microseconds)."""
    cpu, switches = 0.0, 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        cpu += int((task / "schedstat").read_text().split()[0]) / 1e9
        status = (task / "status").read_text()
        switches += sum(int(line.split()[1]) for line in status.splitlines() if "ctxt_switches" in line)
    return cpu, switches


def measure(pids: dict[str, int], window: float) -> dict[str, dict[str, float]]:
    before = {k: usage(p) for k, p in pids.items()}
    time.sleep(window)
    out = {}
    for k, p in pids.items():
        cpu, sw = usage(p)
        out[k] = {"cpu_ms_s": (cpu - before[k][0]) * 1000 / window, "wakeups_s": (sw - before[k][1]) / window}
    return out


class Bench:
    def __init__(self, lab: Lab, tmp: Path) -> None:
        self.lab, self.tmp = lab, tmp
        self.node = lab.nodes[0]
        self.state = str(tmp / "state")
        self.marker = f"sparkctl-bench-{uuid.uuid4().hex[:10]}"
        self.cluster = f"lab{lab.id}"
        self.guard_dir = Path(self.node.data_dir) / "home" / ".local" / "state" / "sparkctl" / "guard"

    def profile(self, name: str, floor_gib: float, env: dict | None = None) -> Path:
        memory = {
            "unified": True,
            "reserve_gib": 0.25,
            "guard": {
                "enabled": True,
                "min_available_gib": round(max(floor_gib, 0.0), 3),
                "kernel_patterns": [f"NVRM: .*NV_ERR_NO_MEMORY.*{self.marker}"],
            },
        }
        engine = {
            "args": {"context-length": 4096, "mem-fraction-static": 0.3},
            "env": env or {},
            "container": {"gpus": False, "shm_size": "64m"},
        }
        modes = {"solo": {"nodes": ["spark1"], "tp": 1, "default": True}}
        return write_lab_profile(self.lab, self.tmp / name, modes=modes, engine=engine, memory=memory)

    def up(self, path: Path, *extra: str) -> int:
        _, proc = cli(self.state, path, "up", "solo", *extra, check=True)
        (c,) = self.lab.docker(self.node).containers.list(
            filters={"label": f"sparkctl.cluster={self.cluster}"}
        )
        return c.attrs["State"]["Pid"]

    def last_trip(self) -> dict:
        lines = (self.guard_dir / f"{self.cluster}.trips.jsonl").read_text().splitlines()
        return json.loads(lines[-1])

    def guard_pid(self) -> int:
        return json.loads((self.guard_dir / f"{self.cluster}.lock").read_text())["pid"]

    def kernel_round(self) -> dict:
        pid = self.up(self.profile("k.yaml", 0))
        with open("/dev/kmsg", "w") as kmsg:
            t0 = time.monotonic()
            kmsg.write(f"<3>NVRM: nvAssertOkFailedNoLog: NV_ERR_NO_MEMORY {self.marker}\n")
        try:
            t1 = wait_gone(pid)
        except NoTrip as exc:
            return self.failed(exc)
        time.sleep(0.3)  # the record is written once the group is gone
        return {"trigger_to_gone_ms": (t1 - t0) * 1000, "guard": self.last_trip()}

    def failed(self, exc: Exception, **extra: object) -> dict:
        """A round in which the group was not gone: what the guard said, then go on."""
        log = self.guard_dir / f"{self.cluster}.log"
        tail = log.read_text().splitlines()[-5:] if log.exists() else []
        st = self.guard_dir / f"{self.cluster}.json"
        seen = json.loads(st.read_text()) if st.exists() else {}
        cli(self.state, self.tmp / "k.yaml", "down")
        return {
            "failed": str(exc),
            **extra,
            "guard_log": tail,
            "guard_state": {k: seen.get(k) for k in ("watching", "mem_available", "docker", "kernel_log")},
        }

    def memory_round(self) -> dict:
        floor = mem_available() - int(1.5 * GIB)
        path = self.profile("m.yaml", floor / GIB, {"STANDIN_ALLOC": "128,0.05,3072"})
        pid = self.up(path)
        crossed: list[float] = []
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                if mem_available() < floor:
                    crossed.append(time.monotonic())
                    return
                time.sleep(0.001)

        threading.Thread(target=watch, daemon=True).start()
        (c,) = self.lab.docker(self.node).containers.list(
            filters={"label": f"sparkctl.cluster={self.cluster}"}
        )
        c.exec_run(["touch", "/tmp/standin-alloc-go"])
        try:
            t1 = wait_gone(pid)
        except NoTrip as exc:
            done.set()
            return self.failed(exc, crossed=bool(crossed), floor=floor)
        done.set()
        time.sleep(0.3)
        trip = self.last_trip()
        cross_ms = (t1 - crossed[0]) * 1000 if crossed else None
        return {"crossing_to_gone_ms": cross_ms, "guard": trip}

    def teardown_baseline(self) -> float:
        """SIGKILL of a plain process holding 1.5 GiB, from here: what the kernel alone needs to
        tear that memory down (the floor under the guard's `gone`)."""
        code = "import sys,time\nb=b'\\x01'*(3<<29)\nsys.stdout.write('ok\\n');sys.stdout.flush()\ntime.sleep(600)"
        proc = subprocess.Popen([sys.executable, "-S", "-c", code], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline() == "ok\n"
        t0 = time.monotonic()
        proc.kill()
        t1 = wait_gone(proc.pid)
        proc.wait()
        return (t1 - t0) * 1000

    def overhead(self, window: float) -> dict:
        dockerd = self.node.dockerd_pid
        sleeper = subprocess.Popen([sys.executable, "-S", "-c", "import time\nwhile True: time.sleep(1)"])
        out = {}
        try:
            self.up(self.profile("o.yaml", 1.0), "--no-guard")
            out["idle baseline"] = measure({"process": sleeper.pid, "dockerd": dockerd}, window)
            self.up(self.profile("o.yaml", 1.0), "--guard")
            pid = self.guard_pid()
            out["guard, first minute"] = measure({"process": pid, "dockerd": dockerd}, window)
            time.sleep(max(0.0, BUSY_S + 2 - window))  # then it lists the containers every 10 s
            out["guard, 1 Hz"] = measure({"process": pid, "dockerd": dockerd}, window)
            self.up(self.profile("o.yaml", mem_available() * 0.55 / GIB), "--guard")
            time.sleep(BUSY_S + 2)
            out["guard near floor, 10 Hz"] = measure(
                {"process": self.guard_pid(), "dockerd": dockerd}, window
            )
            if shutil.which("earlyoom"):
                eo = subprocess.Popen(
                    ["earlyoom", "--dryrun", "-m", "1", "-s", "100", "-r", "0"], stdout=subprocess.DEVNULL
                )
                try:
                    time.sleep(1)
                    out["earlyoom --dryrun"] = measure({"process": eo.pid, "dockerd": dockerd}, window)
                finally:
                    eo.terminate()
                    eo.wait()
        finally:
            sleeper.terminate()
            sleeper.wait()
        return out


def report(kernel: list[dict], memory: list[dict], teardown: list[float], over: dict) -> None:
    def med(xs: list) -> str:
        xs = [x for x in xs if x is not None]
        return f"{statistics.median(xs):.0f} ms" if xs else "-"

    print("\nreaction (medians)")
    print(
        f"  kernel line -> group gone:      {med([r['trigger_to_gone_ms'] for r in kernel])}"
        f" (guard: line read -> gone {med([r['guard']['gone_ms'] for r in kernel])},"
        f" signals sent after {med([r['guard']['kill_ms'] for r in kernel])})"
    )
    print(
        f"  MemAvailable < floor -> gone:   {med([r['crossing_to_gone_ms'] for r in memory])}"
        f" (guard: detected -> gone {med([r['guard']['gone_ms'] for r in memory])},"
        f" signals sent after {med([r['guard']['kill_ms'] for r in memory])})"
    )
    print(f"  baseline: SIGKILL of a plain process holding 1.5 GiB -> gone: {med(teardown)}")
    base = over["idle baseline"]["process"]
    print("\noverhead (per second of wall time)")
    print(f"  {'':26} {'CPU ms/s':>9} {'wakeups/s':>10} {'vs baseline':>12} {'dockerd CPU ms/s':>17}")
    for name, m in over.items():
        p, d = m["process"], m["dockerd"]
        ratio = f"{p['cpu_ms_s'] / base['cpu_ms_s']:.1f}x" if base["cpu_ms_s"] > 0 else "-"
        print(f"  {name:26} {p['cpu_ms_s']:9.2f} {p['wakeups_s']:10.1f} {ratio:>12} {d['cpu_ms_s']:17.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=float, default=20.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Lab(nodes=1) as lab:
        lab.install_engine_image()
        seed_weights(lab)
        b = Bench(lab, Path(tmp))
        try:
            kernel = [b.kernel_round() for _ in range(args.rounds)]
            memory = [b.memory_round() for _ in range(args.rounds)]
            teardown = [b.teardown_baseline() for _ in range(args.rounds)]
            over = b.overhead(args.window)
        finally:
            cli(b.state, Path(tmp) / "k.yaml", "down")
        keys = ("kind", "kill_ms", "gone_ms", "mem_available", "min_available")
        for r in kernel + memory:
            guard = {k: r["guard"].get(k) for k in keys} if "guard" in r else None
            print(json.dumps({k: v for k, v in r.items() if k != "guard"} | {"guard": guard}))
        failed = [r for r in kernel + memory if "failed" in r]
        kernel = [r for r in kernel if "failed" not in r]
        memory = [r for r in memory if "failed" not in r]
        print(f"rounds without a trip: {len(failed)} of {2 * args.rounds}")
        report(kernel, memory, teardown, over)


if __name__ == "__main__":
    main()
