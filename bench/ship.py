"""Benchmark `sparkctl ship` against the reference recipe's commands, in the same run, on a testbed.

    python bench/ship.py [--pad-mb 200] [--weights-mb 200] [--rounds 3] [--no-peers] [--no-shaped]
                         [--fabric-mbit 300] [--big-weights-mb 600]            (root, repo root)

Brings up its own 4-node lab. The data always goes spark1 -> spark2 (-> spark3, spark4) over the
fabric; sparkctl runs in two placements:
  on-source  ON spark1 (`address: local` in its profile), as on a head node
  third      on this machine (the controller), both nodes remote over SSH
Baselines run on spark1, between the same nodes, with spark1's own SSH keys:
  image:   docker save IMG | ssh spark2 docker load -q           (the recipe)
  weights: rsync -a -e ssh <hf>/ spark2:<dir>/
Every measure alternates sparkctl and its baseline for --rounds rounds and prints medians and
ratios: full image, first weights sync, re-ship of unchanged image + weights, overlay bytes that
leave the source (spark1's netdev counters) vs a full save, 1/2/4 streams, 3 peers vs 1; then the
raw primitives (`docker save > /dev/null`, `cat files | ssh spark2 cat > /dev/null`) and the CPU
load of this machine during the run. Each measure is also given in CPU seconds (this process's
children plus the lab's sshd and dockerd with everything they ran): on a machine shared with other
work, wall times follow the load, CPU seconds much less.

3 peers vs 1, three ways (all but --no-peers):
  unshaped   every "node" shares this machine's cores, so 3 peers cost ~3x the CPU and the wall
             time follows; printed with its CPU by category (engines, SSH sessions, sparkctl) and
             the raw primitive under it: `docker load -q` of one saved file into 1 engine vs 3 at
             once, no transfer at all (max(1, rounds - 1) rounds).
  shaped     (--no-shaped skips it) every node's FABRIC egress capped with tc tbf at --fabric-mbit
             (the management link, the controller's SSH, stays free): the link, not the shared
             cores, is the limit, as on real Sparks where each node has its own CPUs. sparkctl
             (image + weights, and weights alone) for max(1, rounds - 1) rounds; the recipe's
             commands from spark1 to every peer at once (3 copies on the source's link) for
             max(1, rounds - 2). The default 300 Mbit/s puts one copy of the default image +
             weights (~600 MB) at ~16 s on the link, against ~10 s of CPU per core for 3 peers.
             The caps come off whatever happens.
With the defaults and --rounds 3 the whole run takes ~7-8 minutes here (the shaped part ~3).
"""

from __future__ import annotations

import argparse
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
from tests.testbed.images import build_engine_image, build_overlay_image  # noqa: E402
from tests.testbed.lab import NODE_MOUNT, Lab  # noqa: E402
from tests.testbed.profiles import lab_profile  # noqa: E402
from tests.testbed_tests.test_ship import make_fake_snapshot  # noqa: E402

IMAGE = "bench/engine:1"
OVERLAY = "bench/engine:overlay"
MODEL = "bench-org/model"
BIG = "bench-org/big"
REPO = "models--" + MODEL.replace("/", "--")
PLACEMENTS = ("on-source", "third")
FABRIC_MBIT = 300  # the shaped measure's cap: see the module docstring
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
        code = "import os,sys; from sparkctl.ship._node import cache_file as c; p=c(sys.argv[1]); os.path.exists(p) and os.unlink(p)"
        self.lab.exec(node, ["env", f"PYTHONPATH={ROOT / 'src'}", sys.executable, "-c", code, repo])


def med(xs: list[float]) -> float:
    return statistics.median(xs)


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


def bench_first_ship(b: Bench, rounds: int, out: dict, what: str) -> None:
    """`what` ("image" or "weights") from nothing on spark2: the recipe's command against sparkctl
    in each placement, alternated, every round starting from an empty peer."""
    if what == "image":
        baseline, name = f"docker save {IMAGE} | ssh {b.fab['spark2']} docker load -q", "recipe"
    else:
        baseline, name = f"rsync -a -e ssh {NODE_MOUNT}/hf/ {b.fab['spark2']}:{NODE_MOUNT}/hf-rsync/", "rsync"

    def empty_peer() -> None:
        if what == "image":
            b.drop_image("spark2")
        else:
            b.drop_weights("spark2")
            b.forget_hashes("spark1")

    base: list[tuple[float, float]] = []
    ship: dict[str, list[tuple[float, float]]] = {p: [] for p in PLACEMENTS}
    const: list[float] = []  # `ship --dry-run` to the empty peer: CLI start, connect, state
    hop: list[float] = []  # `ssh spark2 true` from spark1: the node-to-node handshake alone
    for _ in range(rounds):
        for placement in PLACEMENTS:
            empty_peer()
            base.append(b.measured(lambda: b.sh("spark1", baseline))[:2])
            empty_peer()
            if what == "weights" and placement == "third":  # where first weights' time goes
                empty_peer()
                const.append(b.sparkctl(placement, "pair", "--weights", "--dry-run")[0])
                hop.append(b.sh("spark1", f"ssh {b.fab['spark2']} true"))
            dt, cpu, (_, rep) = b.measured(lambda p=placement: b.sparkctl(p, "pair", f"--{what}"))
            assert rep["results"][0]["action"] == "shipped", rep
            ship[placement].append((dt, cpu))
    if const:
        out["weights_const"], out["hop_handshake"] = med(const), med(hop)
    keep(out, f"{what}_{name}", base)
    for p in PLACEMENTS:
        keep(out, f"{what}_{p}", ship[p])
    b.loads[what] = loadavg()


def keep(out: dict, key: str, runs: list[tuple[float, float]]) -> None:
    """Median wall seconds as `key`, median CPU seconds as `key`_cpu."""
    out[key], out[f"{key}_cpu"] = med([w for w, _c in runs]), med([c for _w, c in runs])


def bench_reship(b: Bench, rounds: int, out: dict) -> None:
    """Everything already on spark2: the recipe copies it again (save|load; rsync's own quick check)."""
    recipe = (
        f"docker save {IMAGE} | ssh {b.fab['spark2']} docker load -q && "
        f"rsync -a -e ssh {NODE_MOUNT}/hf/ {b.fab['spark2']}:{NODE_MOUNT}/hf/"
    )
    b.sparkctl("third", "pair")  # both items in place
    base: list[tuple[float, float]] = []
    cpu: list[float] = []
    ship: dict[str, list[tuple[float, float]]] = {p: [] for p in PLACEMENTS}
    for _ in range(rounds):
        for placement in PLACEMENTS:
            base.append(b.measured(lambda: b.sh("spark1", recipe))[:2])
            dt, all_cpu, (_, rep) = b.measured(lambda p=placement: b.sparkctl(p, "pair"))
            assert rep["bytes_sent"] == 0, rep
            ship[placement].append((dt, all_cpu))
            if placement == "third":
                cpu.append(b.last_cpu)
    keep(out, "reship_recipe", base)
    out["reship_cpu"] = med(cpu)
    for p in PLACEMENTS:
        keep(out, f"reship_{p}", ship[p])
    b.loads["reship"] = loadavg()


def bench_overlay(b: Bench, out: dict) -> None:
    """spark2 has IMAGE; spark1 builds OVERLAY on it: bytes leaving spark1 vs a full save of OVERLAY."""
    b.sparkctl("third", "pair", "--image")
    build_overlay_image(b.lab.docker("spark1"), IMAGE, OVERLAY, extra_kb=1024)
    out["overlay_full"] = sum(
        len(c) for c in b.lab.docker("spark1").api.get_image(OVERLAY, chunk_size=1 << 20)
    )
    for placement in PLACEMENTS:
        with contextlib.suppress(Exception):
            b.lab.docker("spark2").images.remove(OVERLAY, force=True)
        before = b.tx("spark1")
        _, rep = b.sparkctl(placement, "pair", "--image", overlay=True)
        out[f"overlay_{placement}"] = b.tx("spark1") - before
        assert rep["results"][0]["layers_skipped"] >= 1, rep


def bench_streams(b: Bench, rounds: int, out: dict) -> None:
    times: dict[int, list[tuple[float, float]]] = {1: [], 2: [], 4: []}
    for _ in range(rounds):
        for n in times:
            b.drop_weights("spark2")
            b.forget_hashes("spark1")
            args = ("pair", "--weights", "--streams", str(n))
            dt, cpu, _ = b.measured(lambda a=args: b.sparkctl("third", *a))
            times[n].append((dt, cpu))
    for n, ts in times.items():
        keep(out, f"streams_{n}", ts)
    b.loads["streams"] = loadavg()


def bench_peers(b: Bench, rounds: int, out: dict) -> None:
    """Image + weights to 1 peer (mode pair) vs 3 peers (mode all4); bytes leaving spark1 for each,
    and the CPU of each by category (median per category: `cpu_<part>_<mode>`)."""
    peers = [n.name for n in b.lab.nodes[1:]]
    runs: dict[str, list[tuple[float, float]]] = {"pair": [], "all4": []}
    parts: dict[str, list[dict[str, float]]] = {"pair": [], "all4": []}
    for _ in range(rounds):
        for mode in runs:
            b.drop_image(*peers)
            b.drop_weights(*peers)
            before = b.tx("spark1")
            dt, cpu, (_, rep) = b.measured(lambda m=mode: b.sparkctl("third", m))
            assert rep["ok"], rep
            runs[mode].append((dt, cpu))
            parts[mode].append(b.last_parts)
            out[f"tx_{mode}"] = b.tx("spark1") - before
    keep(out, "peers_1", runs["pair"])
    keep(out, "peers_3", runs["all4"])
    for mode, ps in parts.items():
        for part in CPU_PARTS:
            out[f"cpu_{part}_{mode}"] = med([x[part] for x in ps])
    b.loads["peers"] = loadavg()


def bench_loads(b: Bench, rounds: int, out: dict) -> None:
    """The raw primitive under the 3-peer figure, with no transfer at all: `docker load -q` of the
    saved image into spark2's engine alone vs into spark2, spark3 and spark4's at once (the docker
    CLI run here against each node's engine socket, from one file saved once)."""
    import subprocess
    import threading

    peers = [n.name for n in b.lab.nodes[1:]]
    tar = b.work / "image.tar"
    subprocess.run(
        ["docker", "-H", b.lab.node("spark1").docker_host, "save", "-o", str(tar), IMAGE], check=True
    )

    def load(node: str) -> None:
        argv = ["docker", "-H", b.lab.node(node).docker_host, "load", "-q", "-i", str(tar)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        if proc.returncode:
            raise SystemExit(f"{node}: docker load failed: {proc.stderr.strip()[-800:]}")

    def at_once(nodes: list[str]) -> None:
        threads = [threading.Thread(target=load, args=(n,)) for n in nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    runs: dict[int, list[tuple[float, float]]] = {1: [], 3: []}
    try:
        for _ in range(rounds):
            for k in runs:
                b.drop_image(*peers)
                runs[k].append(b.measured(lambda k=k: at_once(peers[:k]))[:2])
    finally:
        tar.unlink(missing_ok=True)
    keep(out, "loads_1", runs[1])
    keep(out, "loads_3", runs[3])
    b.loads["raw loads"] = loadavg()


def naive_script(b: Bench, peers: list[str]) -> str:
    """The recipe's two commands from spark1 to every peer at once (image and weights at the same
    time too, as sparkctl does): the source's link carries one copy per peer."""
    jobs = []
    for peer in peers:
        fab = b.fab[peer]
        jobs += [
            f"docker save {IMAGE} | ssh {fab} docker load -q > /dev/null",
            f"rsync -a -e ssh {NODE_MOUNT}/hf/ {fab}:{NODE_MOUNT}/hf-rsync/",
        ]
    started = " ".join(f"{job} & p{i}=$!;" for i, job in enumerate(jobs))
    waited = " ".join(f"wait $p{i} || rc=1;" for i in range(len(jobs)))
    return f"rc=0; {started} {waited} exit $rc"


def bench_shaped(b: Bench, rounds: int, out: dict, mbit: int) -> None:
    """3 peers vs 1 with every node's fabric egress capped at `mbit` (tc tbf on the fabric netdev
    only; the controller's management link stays free), from nothing on the peers: sparkctl (mode
    pair vs all4, third placement; image + weights, and weights alone: no `docker load`) for
    `rounds` rounds, and the recipe's commands run from spark1 to each peer at once for
    max(1, rounds - 1) of them (its 3 copies on one link make it the longest case; link-bound, its
    ratio moves least). The caps are removed whatever happens."""
    peers = [n.name for n in b.lab.nodes[1:]]
    cases = {
        "ship_1": lambda: b.sparkctl("third", "pair"),
        "ship_3": lambda: b.sparkctl("third", "all4"),
        "wship_1": lambda: b.sparkctl("third", "pair", "--weights"),
        "wship_3": lambda: b.sparkctl("third", "all4", "--weights"),
        "naive_1": lambda: b.sh("spark1", naive_script(b, peers[:1])),
        "naive_3": lambda: b.sh("spark1", naive_script(b, peers)),
    }
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
    try:
        for n in b.lab.nodes:
            b.lab.set_egress_rate(n, mbit, fabric_only=True)
        for i in range(rounds):
            for case, fn in cases.items():
                if case.startswith("naive") and i >= max(1, rounds - 1):
                    continue
                b.drop_image(*peers)
                b.drop_weights(*peers)
                before = b.tx("spark1")
                runs[case].append(b.measured(fn)[:2])
                out[f"shaped_tx_{case}"] = b.tx("spark1") - before
    finally:
        for n in b.lab.nodes:
            b.lab.set_egress_rate(n, None, fabric_only=True)
    for case, rs in runs.items():
        keep(out, f"shaped_{case}", rs)
    out["shaped_mbit"] = mbit
    b.loads["shaped"] = loadavg()


def bench_big_weights(b: Bench, rounds: int, out: dict, mb: int) -> None:
    """First sync of a model `mb` MB large (third machine vs rsync of that repo): sparkctl's
    constant is the same at any size, so the ratio shows where it stops mattering."""
    files = {f"model-{i + 1:05d}-of-00004.safetensors": (mb << 20) // 4 for i in range(4)}
    make_fake_snapshot(Path(b.lab.node("spark1").node_root) / "hf", BIG, files | {"config.json": 2000})
    doc = yaml.safe_load(b.profiles["third"].read_text())
    doc["model"]["target"] = {"id": BIG, "revision": "main"}
    b.profiles["third-big"] = b.work / "third-big.yaml"
    b.profiles["third-big"].write_text(yaml.safe_dump(doc, sort_keys=False))
    big_repo = f"{NODE_MOUNT}/hf/hub/models--{BIG.replace('/', '--')}"
    baseline = f"mkdir -p {NODE_MOUNT}/hf-rsync && rsync -a -e ssh {big_repo} {b.fab['spark2']}:{NODE_MOUNT}/hf-rsync/"
    base: list[tuple[float, float]] = []
    ours: list[tuple[float, float]] = []
    for _ in range(rounds):
        b.drop_weights("spark2")
        b.sh("spark2", f"mkdir -p {NODE_MOUNT}/hf-rsync")
        base.append(b.measured(lambda: b.sh("spark1", baseline))[:2])
        b.drop_weights("spark2")
        b.forget_hashes("spark1", big_repo)
        dt, cpu, (_, rep) = b.measured(lambda: b.sparkctl("third", "pair", "--weights", profile="third-big"))
        assert rep["results"][0]["action"] == "shipped", rep
        ours.append((dt, cpu))
    keep(out, "big_rsync", base)
    keep(out, "big_third", ours)
    out["big_mb"] = mb
    b.loads["big weights"] = loadavg()


def bench_primitives(b: Bench, out: dict) -> None:
    out["prim_save"] = b.sh("spark1", f"docker save {IMAGE} > /dev/null")
    out["prim_ssh"] = b.sh(
        "spark1", f"cat {NODE_MOUNT}/hf/hub/{REPO}/blobs/* | ssh {b.fab['spark2']} cat > /dev/null"
    )
    out["prim_save_ssh"] = b.sh("spark1", f"docker save {IMAGE} | ssh {b.fab['spark2']} cat > /dev/null")


def _pair(out: dict, base: str, ours: str, what: str, target: str, speed: bool = False) -> list:
    """Wall and CPU rows of one measure: baseline / sparkctl seconds and their ratio."""
    fmt = "{:.1f}x" if speed else "{:.2f}"
    wall, cpu = out[base] / out[ours], out[base + "_cpu"] / out[ours + "_cpu"]
    return [
        (f"{what}, wall s", f"{out[base]:.2f} / {out[ours]:.2f} = {fmt.format(wall)}", target),
        (f"{what}, CPU s", f"{out[base + '_cpu']:.2f} / {out[ours + '_cpu']:.2f} = {fmt.format(cpu)}", ""),
    ]


def peers_profile_rows(out: dict) -> list[tuple[str, str, str]]:
    """Where the 3-peer CPU goes (1 / 3 peers by category) and the raw primitive: 1 vs 3 loads."""
    rows: list[tuple[str, str, str]] = []
    if "cpu_engines_pair" in out:
        for part, words in CPU_PARTS.items():
            one, three = out[f"cpu_{part}_pair"], out[f"cpu_{part}_all4"]
            rows.append((f"  CPU 1/3 peers: {words}", f"{one:.2f} / {three:.2f} = {three / one:.2f}x", ""))
    if "loads_1" in out:
        w1, w3, c1, c3 = (out[k] for k in ("loads_1", "loads_3", "loads_1_cpu", "loads_3_cpu"))
        rows += [
            (
                "raw: docker load, 1 / 3 engines at once, wall (s)",
                f"{w1:.2f} / {w3:.2f} = {w3 / w1:.2f}x",
                "",
            ),
            ("raw: docker load, 1 / 3 engines at once, CPU (s)", f"{c1:.2f} / {c3:.2f} = {c3 / c1:.2f}x", ""),
        ]
    return rows


def shaped_rows(out: dict) -> list[tuple[str, str, str]]:
    """3 peers vs 1 with every node's fabric egress capped: sparkctl and the naive fan-out."""
    if "shaped_mbit" not in out:
        return []
    mbit, mb = out["shaped_mbit"], 1e6
    w = {k: out[f"shaped_{k}"] for k in ("ship_1", "ship_3", "naive_1", "naive_3")}
    tx = {k: out[f"shaped_tx_{k}"] / mb for k in w}
    link = out["shaped_tx_ship_1"] * 8 / (mbit * 1e6)
    cores = os.cpu_count() or 1
    return [
        (f"fabric capped at {mbit} Mbit/s: one copy on the link (s)", f"{link:.2f}", ""),
        (
            "  sparkctl to 1 / 3 peers, wall (s)",
            f"{w['ship_1']:.2f} / {w['ship_3']:.2f} = {w['ship_3'] / w['ship_1']:.2f}x",
            "<= 1.5x",
        ),
        (
            f"  sparkctl to 3 peers: CPU s / {cores} cores vs wall",
            f"{out['shaped_ship_3_cpu'] / cores:.2f} / {w['ship_3']:.2f}",
            "link-bound if <",
        ),
        (
            "  sparkctl weights alone (no docker load) 1 / 3 peers",
            f"{out['shaped_wship_1']:.2f} / {out['shaped_wship_3']:.2f} = "
            f"{out['shaped_wship_3'] / out['shaped_wship_1']:.2f}x",
            "",
        ),
        (
            "  naive (recipe to each peer at once) 1 / 3 peers, wall",
            f"{w['naive_1']:.2f} / {w['naive_3']:.2f} = {w['naive_3'] / w['naive_1']:.2f}x",
            "",
        ),
        (
            "  MB leaving spark1: sparkctl 1 / 3, naive 1 / 3",
            f"{tx['ship_1']:.0f} / {tx['ship_3']:.0f}, {tx['naive_1']:.0f} / {tx['naive_3']:.0f}",
            "",
        ),
        ("  3 peers: naive / sparkctl, wall", f"{w['naive_3'] / w['ship_3']:.2f}x", ""),
    ]


def report(
    out: dict, args: argparse.Namespace, cpu: float, image_bytes: int, weights_bytes: int, loads: dict
) -> None:
    rows: list[tuple[str, str, str]] = []
    for p in PLACEMENTS:
        rows += _pair(out, "image_recipe", f"image_{p}", f"[{p}] full image (recipe)", ">= 1.0")
        rows += _pair(out, "weights_rsync", f"weights_{p}", f"[{p}] first weights (rsync)", ">= 1.0")
        rows += _pair(
            out, "reship_recipe", f"reship_{p}", f"[{p}] re-ship unchanged (recipe)", ">= 10x", True
        )
        if p == "third":
            rows.append(
                ("[third] re-ship: CPU of the sparkctl process alone (s)", f"{out['reship_cpu']:.2f}", "")
            )
        rows += [
            (
                f"[{p}] overlay: bytes leaving spark1 / full save",
                f"{out[f'overlay_{p}']:,} / {out['overlay_full']:,}",
                "",
            ),
            (f"[{p}] overlay ratio", f"{100 * out[f'overlay_{p}'] / out['overlay_full']:.2f} %", "<= 1 %"),
        ]
    if "weights_const" in out:
        push = out["weights_third"] - out["weights_const"]
        rows += [
            (
                "[third] first weights = constant + push (s)",
                f"{out['weights_third']:.2f} = {out['weights_const']:.2f} + {push:.2f}",
                "constant: `ship --dry-run`",
            ),
            ("[third] push alone vs rsync", f"{out['weights_rsync'] / push:.2f}", ""),
            ("node-to-node SSH handshake (`ssh spark2 true`, s)", f"{out['hop_handshake']:.2f}", ""),
        ]
    if "big_third" in out:
        rows += _pair(
            out, "big_rsync", "big_third", f"[third] first weights, {out['big_mb']} MB (rsync)", ">= 1.0"
        )
    if "streams_1" in out:
        for n in (1, 2, 4):
            rows.append(
                (
                    f"first weights, {n} stream(s): wall s / CPU s / speed-up",
                    f"{out[f'streams_{n}']:.2f} / {out[f'streams_{n}_cpu']:.2f} / "
                    f"{out['streams_1'] / out[f'streams_{n}']:.2f}x",
                    "",
                )
            )
    if "peers_1" in out:
        rows += [
            ("image+weights to 1 / 3 peers, wall (s)", f"{out['peers_1']:.2f} / {out['peers_3']:.2f}", ""),
            ("3 peers vs 1 peer, wall", f"{out['peers_3'] / out['peers_1']:.2f}x", "<= 1.5x"),
            (
                "image+weights to 1 / 3 peers, CPU (s)",
                f"{out['peers_1_cpu']:.2f} / {out['peers_3_cpu']:.2f} = "
                f"{out['peers_3_cpu'] / out['peers_1_cpu']:.2f}x",
                "",
            ),
            (
                "bytes leaving spark1: 3 peers / 1 peer",
                f"{out['tx_all4'] / out['tx_pair']:.2f}x",
                "1 copy per byte",
            ),
        ]
    rows += peers_profile_rows(out) + shaped_rows(out)
    mb = 1e6
    rows += [
        ("raw: docker save > /dev/null (MB/s)", f"{image_bytes / mb / out['prim_save']:.0f}", ""),
        ("raw: docker save | ssh spark2 cat (MB/s)", f"{image_bytes / mb / out['prim_save_ssh']:.0f}", ""),
        ("raw: cat blobs | ssh spark2 cat (MB/s)", f"{weights_bytes / mb / out['prim_ssh']:.0f}", ""),
        (
            "sparkctl image (third) vs raw save|ssh cat",
            f"{out['prim_save_ssh'] / out['image_third']:.2f}",
            "",
        ),
        ("sparkctl weights (third) vs raw cat|ssh cat", f"{out['prim_ssh'] / out['weights_third']:.2f}", ""),
        ("CPU busy during the run (2 cores, all %)", f"{cpu:.0f} %", ""),
        *((f"load average (1/5/15 min) after {k}", v, "") for k, v in loads.items()),
    ]
    print(
        f"\nimage {image_bytes / mb:.0f} MB saved, weights {weights_bytes / mb:.0f} MB, "
        f"medians of {args.rounds} alternated rounds, {os.cpu_count()} CPUs\n"
        "  (name) = the baseline; a pair is baseline / sparkctl = ratio, > 1: sparkctl is faster"
    )
    for name, value, target in rows:
        print(f"  {name:<52} {value:>28}  {target}")


def shaped_rounds(rounds: int) -> int:
    """Rounds of the shaped and raw-load measures: one fewer than the others (each shaped round
    moves image+weights four times over a slow link), at least one."""
    return max(1, rounds - 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pad-mb", type=int, default=200, help="size of the image's big random layer")
    ap.add_argument("--weights-mb", type=int, default=200, help="size of the fake model snapshot")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-peers", action="store_true", help="skip 1/2/4 streams and 3 peers vs 1")
    ap.add_argument("--no-shaped", action="store_true", help="skip 3 peers vs 1 on a rate-limited fabric")
    ap.add_argument(
        "--fabric-mbit",
        type=int,
        default=FABRIC_MBIT,
        help="fabric egress cap per node for the shaped measure",
    )
    ap.add_argument(
        "--big-weights-mb", type=int, default=600, help="a first sync of a larger model too (0: skip)"
    )
    args = ap.parse_args()
    disk = max(2048, (args.weights_mb + args.big_weights_mb) * 3 + 512)
    with Lab(nodes=2 if args.no_peers else 4, disk_mb=disk) as lab:
        b = Bench(lab, Path(lab.data_dir) / "bench")
        b.work.mkdir()
        write_profiles(b)
        print(
            f"building a {args.pad_mb} MB image and {args.weights_mb} MB of weights on spark1 ...", flush=True
        )
        build_engine_image(lab.docker("spark1"), tag=IMAGE, pad_mb=args.pad_mb)
        image_bytes = sum(len(c) for c in lab.docker("spark1").api.get_image(IMAGE, chunk_size=1 << 20))
        files = {f"model-{i + 1:05d}-of-00004.safetensors": (args.weights_mb << 20) // 4 for i in range(4)}
        make_fake_snapshot(Path(lab.node("spark1").node_root) / "hf", MODEL, files | {"config.json": 2000})
        weights_bytes = sum(files.values()) + 2000
        out: dict = {}
        cpu = Cpu()
        for step, fn in (
            ("full image", lambda *a: bench_first_ship(*a, "image")),
            ("first weights sync", lambda *a: bench_first_ship(*a, "weights")),
            ("re-ship unchanged", bench_reship),
        ):
            print(f"{step} ... (load average {loadavg()})", flush=True)
            fn(b, args.rounds, out)
        print(f"overlay ... (load average {loadavg()})", flush=True)
        bench_overlay(b, out)
        if not args.no_peers:
            print("streams 1/2/4 ...", flush=True)
            bench_streams(b, args.rounds, out)
            print("3 peers vs 1 ...", flush=True)
            bench_peers(b, args.rounds, out)
            print("raw docker load, 1 vs 3 engines at once ...", flush=True)
            bench_loads(b, shaped_rounds(args.rounds), out)
            if not args.no_shaped:
                print(f"3 peers vs 1, fabric capped at {args.fabric_mbit} Mbit/s ...", flush=True)
                bench_shaped(b, shaped_rounds(args.rounds), out, args.fabric_mbit)
        if args.big_weights_mb:  # after the shaped measure: the recipe there rsyncs all of hf/
            print(f"first weights, {args.big_weights_mb} MB ... (load average {loadavg()})", flush=True)
            bench_big_weights(b, args.rounds, out, args.big_weights_mb)
        bench_primitives(b, out)
        busy = cpu.busy()
        b.loads["the run"] = loadavg()
    report(out, args, busy, image_bytes, weights_bytes, b.loads)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
