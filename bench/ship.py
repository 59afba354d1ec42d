"""Benchmark `sparkctl ship` against the reference recipe's commands, in the same run, on a testbed.

    python bench/ship.py [--pad-mb 200] [--weights-mb 200] [--rounds 3] [--no-peers]   (root, repo root)

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
load of this machine during the run.
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
REPO = "models--" + MODEL.replace("/", "--")
PLACEMENTS = ("on-source", "third")


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


class Bench:
    def __init__(self, lab: Lab, work: Path) -> None:
        self.lab, self.work = lab, work
        self.fab = {n.name: n.fabric_ip for n in lab.nodes}
        self.profiles: dict[str, Path] = {}
        self.last_cpu = 0.0  # CPU seconds of the last sparkctl process run here (placement third)

    # -- running things --------------------------------------------------------------------------
    def sh(self, node: str, script: str) -> float:
        """A shell script inside the node (its engine as DOCKER_HOST); returns wall seconds."""
        env = ["env", f"DOCKER_HOST={self.lab.node(node).docker_host}"]
        t0 = time.monotonic()
        proc = self.lab.exec(node, [*env, "sh", "-c", script], check=False, timeout=900)
        if proc.returncode:
            raise SystemExit(f"{node}: {script!r} failed: {proc.stderr.strip()[-800:]}")
        return time.monotonic() - t0

    def sparkctl(self, placement: str, mode: str, *args: str, overlay: bool = False) -> tuple[float, dict]:
        """`sparkctl ship MODE --json ARGS`, the whole CLI process timed."""
        key = placement + ("-overlay" if overlay else "")
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

    def forget_hashes(self, node: str) -> None:
        """Drop the node's hash cache for the model: the next sync is a first sync (reads and hashes all)."""
        code = "import os,sys; from sparkctl.ship._node import cache_file as c; p=c(sys.argv[1]); os.path.exists(p) and os.unlink(p)"
        repo = f"{NODE_MOUNT}/hf/hub/{REPO}"
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


def bench_image(b: Bench, rounds: int, out: dict) -> None:
    recipe = f"docker save {IMAGE} | ssh {b.fab['spark2']} docker load -q"
    base: list[float] = []
    ship: dict[str, list[float]] = {p: [] for p in PLACEMENTS}
    for _ in range(rounds):
        for placement in PLACEMENTS:
            b.drop_image("spark2")
            base.append(b.sh("spark1", recipe))
            b.drop_image("spark2")
            dt, rep = b.sparkctl(placement, "pair", "--image")
            assert rep["results"][0]["action"] == "shipped", rep
            ship[placement].append(dt)
    out["image_recipe"] = med(base)
    for p in PLACEMENTS:
        out[f"image_{p}"] = med(ship[p])


def bench_weights(b: Bench, rounds: int, out: dict) -> None:
    rsync = f"rsync -a -e ssh {NODE_MOUNT}/hf/ {b.fab['spark2']}:{NODE_MOUNT}/hf-rsync/"
    base: list[float] = []
    ship: dict[str, list[float]] = {p: [] for p in PLACEMENTS}
    for _ in range(rounds):
        for placement in PLACEMENTS:
            b.drop_weights("spark2")
            base.append(b.sh("spark1", rsync))
            b.drop_weights("spark2")
            b.forget_hashes("spark1")
            dt, rep = b.sparkctl(placement, "pair", "--weights")
            assert rep["results"][0]["action"] == "shipped", rep
            ship[placement].append(dt)
    out["weights_rsync"] = med(base)
    for p in PLACEMENTS:
        out[f"weights_{p}"] = med(ship[p])


def bench_reship(b: Bench, rounds: int, out: dict) -> None:
    """Everything already on spark2: the recipe copies it again (save|load; rsync's own quick check)."""
    recipe = (
        f"docker save {IMAGE} | ssh {b.fab['spark2']} docker load -q && "
        f"rsync -a -e ssh {NODE_MOUNT}/hf/ {b.fab['spark2']}:{NODE_MOUNT}/hf/"
    )
    b.sparkctl("third", "pair")  # both items in place
    base: list[float] = []
    cpu: list[float] = []
    ship: dict[str, list[float]] = {p: [] for p in PLACEMENTS}
    for _ in range(rounds):
        for placement in PLACEMENTS:
            base.append(b.sh("spark1", recipe))
            dt, rep = b.sparkctl(placement, "pair")
            assert rep["bytes_sent"] == 0, rep
            ship[placement].append(dt)
            if placement == "third":
                cpu.append(b.last_cpu)
    out["reship_recipe"], out["reship_cpu"] = med(base), med(cpu)
    for p in PLACEMENTS:
        out[f"reship_{p}"] = med(ship[p])


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
    times: dict[int, list[float]] = {1: [], 2: [], 4: []}
    for _ in range(rounds):
        for n in times:
            b.drop_weights("spark2")
            dt, rep = b.sparkctl("third", "pair", "--weights", "--streams", str(n))
            times[n].append(dt)
    for n, ts in times.items():
        out[f"streams_{n}"] = med(ts)


def bench_peers(b: Bench, rounds: int, out: dict) -> None:
    """Image + weights to 1 peer (mode pair) vs 3 peers (mode all4); bytes leaving spark1 for each."""
    peers = [n.name for n in b.lab.nodes[1:]]
    one: list[float] = []
    three: list[float] = []
    for _ in range(rounds):
        for mode, acc in (("pair", one), ("all4", three)):
            b.drop_image(*peers)
            b.drop_weights(*peers)
            before = b.tx("spark1")
            dt, rep = b.sparkctl("third", mode)
            assert rep["ok"], rep
            acc.append(dt)
            out[f"tx_{mode}"] = b.tx("spark1") - before
    out["peers_1"], out["peers_3"] = med(one), med(three)


def bench_primitives(b: Bench, out: dict) -> None:
    out["prim_save"] = b.sh("spark1", f"docker save {IMAGE} > /dev/null")
    out["prim_ssh"] = b.sh(
        "spark1", f"cat {NODE_MOUNT}/hf/hub/{REPO}/blobs/* | ssh {b.fab['spark2']} cat > /dev/null"
    )
    out["prim_save_ssh"] = b.sh("spark1", f"docker save {IMAGE} | ssh {b.fab['spark2']} cat > /dev/null")


def report(out: dict, args: argparse.Namespace, cpu: float, image_bytes: int, weights_bytes: int) -> None:
    rows: list[tuple[str, str, str]] = []
    for p in PLACEMENTS:
        rows += [
            (
                f"[{p}] full image: recipe / sparkctl (s)",
                f"{out['image_recipe']:.2f} / {out[f'image_{p}']:.2f}",
                "",
            ),
            (
                f"[{p}] full image ratio (recipe/sparkctl)",
                f"{out['image_recipe'] / out[f'image_{p}']:.2f}",
                ">= 1.0",
            ),
            (
                f"[{p}] first weights: rsync / sparkctl (s)",
                f"{out['weights_rsync']:.2f} / {out[f'weights_{p}']:.2f}",
                "",
            ),
            (
                f"[{p}] first weights ratio (rsync/sparkctl)",
                f"{out['weights_rsync'] / out[f'weights_{p}']:.2f}",
                ">= 1.0",
            ),
            (
                f"[{p}] re-ship unchanged: recipe / sparkctl (s)",
                f"{out['reship_recipe']:.2f} / {out[f'reship_{p}']:.2f}",
                "sparkctl < ~1 s",
            ),
            (
                f"[{p}] re-ship unchanged speed-up",
                f"{out['reship_recipe'] / out[f'reship_{p}']:.1f}x",
                ">= 10x",
            ),
            *(
                [
                    (
                        "[third] re-ship unchanged: CPU time of the sparkctl process (s)",
                        f"{out['reship_cpu']:.2f}",
                        "load-independent",
                    )
                ]
                if p == "third"
                else []
            ),
            (
                f"[{p}] overlay: bytes leaving spark1 / full save",
                f"{out[f'overlay_{p}']:,} / {out['overlay_full']:,}",
                "",
            ),
            (f"[{p}] overlay ratio", f"{100 * out[f'overlay_{p}'] / out['overlay_full']:.2f} %", "<= 1 %"),
        ]
    if "streams_1" in out:
        for n in (1, 2, 4):
            rows.append(
                (
                    f"first weights, {n} stream(s) (s) / speed-up vs 1",
                    f"{out[f'streams_{n}']:.2f} / {out['streams_1'] / out[f'streams_{n}']:.2f}x",
                    "",
                )
            )
    if "peers_1" in out:
        rows += [
            ("image+weights to 1 peer / 3 peers (s)", f"{out['peers_1']:.2f} / {out['peers_3']:.2f}", ""),
            ("3 peers vs 1 peer (time)", f"{out['peers_3'] / out['peers_1']:.2f}x", "<= 1.5x"),
            (
                "bytes leaving spark1: 3 peers / 1 peer",
                f"{out['tx_all4'] / out['tx_pair']:.2f}x",
                "1 copy per byte",
            ),
        ]
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
        ("load average (1, 5 min) at the end", " ".join(Path("/proc/loadavg").read_text().split()[:2]), ""),
    ]
    print(
        f"\nimage {image_bytes / mb:.0f} MB saved, weights {weights_bytes / mb:.0f} MB, "
        f"medians of {args.rounds} alternated rounds, {os.cpu_count()} CPUs"
    )
    for name, value, target in rows:
        print(f"  {name:<52} {value:>24}  {target}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pad-mb", type=int, default=200, help="size of the image's big random layer")
    ap.add_argument("--weights-mb", type=int, default=200, help="size of the fake model snapshot")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-peers", action="store_true", help="skip 1/2/4 streams and 3 peers vs 1")
    args = ap.parse_args()
    with Lab(nodes=2 if args.no_peers else 4, disk_mb=max(2048, args.weights_mb * 3 + 512)) as lab:
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
            ("full image", bench_image),
            ("first weights sync", bench_weights),
            ("re-ship unchanged", bench_reship),
        ):
            print(f"{step} ...", flush=True)
            fn(b, args.rounds, out)
        print("overlay ...", flush=True)
        bench_overlay(b, out)
        if not args.no_peers:
            print("streams 1/2/4 ...", flush=True)
            bench_streams(b, args.rounds, out)
            print("3 peers vs 1 ...", flush=True)
            bench_peers(b, args.rounds, out)
        bench_primitives(b, out)
        busy = cpu.busy()
    report(out, args, busy, image_bytes, weights_bytes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
