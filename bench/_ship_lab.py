"""The lab side of bench/ship.py: the 4-node testbed it measures on, what it runs there (sparkctl
in each placement, the recipe's commands), and the CPU seconds of each measure by category."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

import yaml  # noqa: E402
from tests.testbed.lab import NODE_MOUNT, Lab  # noqa: E402
from tests.testbed.profiles import lab_profile  # noqa: E402

IMAGE = "bench/engine:1"
OVERLAY = "bench/engine:overlay"
MODEL = "bench-org/model"
BIG = "bench-org/big"
REPO = "models--" + MODEL.replace("/", "--")
PLACEMENTS = ("on-source", "third")

# CPU categories of Bench.cpu_parts(), with the words the report uses for them.
CPU_PARTS = {
    "engines": "engines (dockerd, containerd)",
    "ssh": "sshd sessions (node programs, hops)",
    "here": "the sparkctl process",
}


class Cpu:
    """Busy share of this machine's CPUs between start() and stop() (from /proc/stat)."""

    @staticmethod
    def _read() -> tuple[int, int]:
        vals = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        return sum(vals), vals[3] + vals[4]

    def __init__(self) -> None:
        self.t0, self.i0 = self._read()

    def busy(self) -> float:
        t, i = self._read()
        return 100.0 * (1 - (i - self.i0) / max(1, t - self.t0))


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


class Bench:
    def __init__(self, lab: Lab, work: Path) -> None:
        self.lab, self.work = lab, work
        self.fab = {n.name: n.fabric_ip for n in lab.nodes}
        self.profiles: dict[str, Path] = {}
        self.last_cpu = 0.0  # CPU seconds of the last sparkctl process run here (placement third)
        self.loads: dict[str, str] = {}  # load average at the end of each measure
        self.last_parts: dict[str, float] = {}  # CPU by category of the last measured() call

    def cpu_parts(self) -> dict[str, float]:
        """CPU seconds used so far by everything a measure runs, by category (CPU_PARTS): the lab's
        engines (each node's dockerd and containerd: the engine side of `docker load`/`save`), the
        lab's SSH sessions (each node's sshd with its reaped children: every session and what it ran:
        node programs, their ssh hops, docker CLIs), and this process's children (sparkctl, the
        recipe's commands: they run under nsenter from here). Other sessions' load on the machine
        is not in it: the load-independent side of a figure."""
        import resource

        hz = os.sysconf("SC_CLK_TCK")
        parts = dict.fromkeys(CPU_PARTS, 0.0)
        for n in self.lab.nodes:
            for part, pid in (("engines", n.dockerd_pid), ("ssh", n.sshd_pid)):
                if not pid:
                    continue
                pids = [pid]
                for kids in Path(f"/proc/{pid}/task").glob("*/children"):
                    with contextlib.suppress(OSError):
                        pids += [int(x) for x in kids.read_text().split()]
                for p in pids:
                    with contextlib.suppress(OSError):
                        stat = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
                        parts[part] += sum(int(x) for x in stat[11:15]) / hz
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        parts["here"] = r.ru_utime + r.ru_stime
        return parts

    def cpu(self) -> float:
        return sum(self.cpu_parts().values())

    def measured(self, fn):  # noqa: ANN001, ANN201 - any callable, its result
        """(wall seconds, CPU seconds, fn's result); see cpu_parts(). The CPU by category is left
        in self.last_parts."""
        c0, t0 = self.cpu_parts(), time.monotonic()
        res = fn()
        dt = time.monotonic() - t0
        time.sleep(0.05)  # let the nodes' sshd reap the sessions that just ended (their CPU counts)
        c1 = self.cpu_parts()
        self.last_parts = {k: c1[k] - c0[k] for k in CPU_PARTS}
        return dt, sum(self.last_parts.values()), res

    # -- running things --------------------------------------------------------------------------
    def sh(self, node: str, script: str) -> float:
        """A shell script inside the node (its engine as DOCKER_HOST); returns wall seconds."""
        env = ["env", f"DOCKER_HOST={self.lab.node(node).docker_host}"]
        t0 = time.monotonic()
        proc = self.lab.exec(node, [*env, "sh", "-c", script], check=False, timeout=900)
        if proc.returncode:
            raise SystemExit(f"{node}: {script!r} failed: {proc.stderr.strip()[-800:]}")
        return time.monotonic() - t0

    def sparkctl(
        self, placement: str, mode: str, *args: str, overlay: bool = False, profile: str | None = None
    ) -> tuple[float, dict]:
        """`sparkctl ship MODE --json ARGS`, the whole CLI process timed."""
        key = profile or placement + ("-overlay" if overlay else "")
        argv = [
            sys.executable,
            "-m",
            "sparkctl",
            "ship",
            mode,
            "-p",
            str(self.profiles[key]),
            "--json",
            *args,
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        t0 = time.monotonic()
        if placement == "on-source":
            n1 = self.lab.node("spark1")
            envl = ["env", f"DOCKER_HOST={n1.docker_host}", f"PYTHONPATH={ROOT / 'src'}"]
            proc = self.lab.exec("spark1", [*envl, *argv], check=False, timeout=900)
        else:
            import resource
            import subprocess

            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            self.last_cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
        dt = time.monotonic() - t0
        if proc.returncode:
            raise SystemExit(f"sparkctl ship ({placement}) failed: {proc.stderr.strip()[-1500:]}")
        return dt, json.loads(proc.stdout)

    def tx(self, node: str) -> int:
        """Bytes sent by the node on all its links (mgmt + fabric)."""
        n = self.lab.node(node)
        out = self.lab.exec(
            node,
            [
                "cat",
                "/sys/class/net/eth0/statistics/tx_bytes",
                f"/sys/class/net/{n.fabric_netdev}/statistics/tx_bytes",
            ],
        ).stdout
        return sum(int(x) for x in out.split())

    # -- state of the peers ----------------------------------------------------------------------
    def drop_image(self, *nodes: str) -> None:
        for node in nodes:
            client = self.lab.docker(node)
            for ref in (IMAGE, OVERLAY):
                with contextlib.suppress(Exception):  # absent is fine
                    client.images.remove(ref, force=True)
            client.images.prune(filters={"dangling": False})

    def drop_weights(self, *nodes: str) -> None:
        for node in nodes:
            for sub in ("hf", "hf-rsync"):
                shutil.rmtree(Path(self.lab.node(node).node_root) / sub, ignore_errors=True)
            self.forget_hashes(node)

    def forget_hashes(self, node: str, repo: str = f"{NODE_MOUNT}/hf/hub/{REPO}") -> None:
        """Drop the node's hash cache for the model: the next sync is a first sync (reads and hashes all)."""
        code = "import os,sys; from sparkctl.node.base import cache_file as c; p=c(sys.argv[1]); os.path.exists(p) and os.unlink(p)"
        self.lab.exec(node, ["env", f"PYTHONPATH={ROOT / 'src'}", sys.executable, "-c", code, repo])


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def keep(out: dict, key: str, runs: list[tuple[float, float]]) -> None:
    """Median wall seconds as `key`, median CPU seconds as `key`_cpu."""
    out[key], out[f"{key}_cpu"] = med([w for w, _c in runs]), med([c for _w, c in runs])


def write_profiles(b: Bench) -> None:
    for placement in PLACEMENTS:
        for overlay in (False, True):
            doc = lab_profile(
                b.lab,
                image=OVERLAY if overlay else IMAGE,
                modes={
                    "pair": {"nodes": ["spark1", "spark2"], "tp": 2, "default": True},
                    "all4": {"nodes": [n.name for n in b.lab.nodes], "tp": len(b.lab.nodes)},
                },
            )
            if placement == "on-source":
                doc["nodes"][0]["address"] = "local"
            doc["model"]["target"] = {"id": MODEL, "revision": "main"}
            doc["model"]["draft"] = None
            key = placement + ("-overlay" if overlay else "")
            b.profiles[key] = b.work / f"{key}.yaml"
            b.profiles[key].write_text(yaml.safe_dump(doc, sort_keys=False))
