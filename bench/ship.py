"""Benchmark `sparkctl ship` against the reference recipe's commands, in the same run, on a testbed.

    python bench/ship.py [--pad-mb 200] [--weights-mb 200] [--rounds 3] [--no-peers] [--no-shaped]
                         [--fabric-mbit 300] [--big-weights-mb 300,600]            (root, repo root)

Brings up its own 4-node lab. The data always goes spark1 -> spark2 (-> spark3, spark4) over the
fabric; sparkctl runs in two placements:
  on-source  ON spark1 (`address: local` in its profile), as on a head node
  third      on this machine (the controller), both nodes remote over SSH
Baselines run on spark1, between the same nodes, with spark1's own SSH keys:
  image:   docker save IMG | ssh spark2 docker load -q           (the recipe)
  weights: rsync -a -e ssh <hf>/ spark2:<dir>/
Every measure alternates sparkctl and its baseline for --rounds rounds and prints medians and
ratios: full image (third machine also with `--no-compress`), first weights sync (also split into sparkctl's constant, `ship --dry-run`, and
the push, next to `ssh spark2 true` alone), re-ship of unchanged image + weights, overlay bytes that
leave the source (spark1's netdev counters) vs a full save, 1/2/4 streams, 3 peers vs 1, first
syncs of larger models (--big-weights-mb: 300 MB, the size issue #14's lab had, and 600); then the
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
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

import yaml  # noqa: E402
from tests.testbed.images import build_engine_image, build_overlay_image  # noqa: E402
from tests.testbed_tests.test_ship import make_fake_snapshot  # noqa: E402

from _ship_lab import (  # noqa: E402
    BIG,
    IMAGE,
    MODEL,
    NODE_MOUNT,
    OVERLAY,
    PLACEMENTS,
    REPO,
    Bench,
    Cpu,
    Lab,
    keep,
    loadavg,
    med,
    write_profiles,
)
from _ship_peers import (  # noqa: E402
    bench_loads,
    bench_peers,
    bench_shaped,
    bench_streams,
    peers_profile_rows,
    shaped_rounds,
    shaped_rows,
)

FABRIC_MBIT = 300  # the shaped measure's cap: see the module docstring


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
    raw: list[tuple[float, float]] = []  # the image without zstd on the link (`--no-compress`)
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
            if what == "image" and placement == "third":
                empty_peer()
                raw.append(b.measured(lambda: b.sparkctl("third", "pair", "--image", "--no-compress"))[:2])
    if raw:
        keep(out, "image_third_raw", raw)
    if const:
        out["weights_const"], out["hop_handshake"] = med(const), med(hop)
    keep(out, f"{what}_{name}", base)
    for p in PLACEMENTS:
        keep(out, f"{what}_{p}", ship[p])
    b.loads[what] = loadavg()


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


def bench_big_weights(b: Bench, rounds: int, out: dict, mb: int) -> None:
    """First sync of a model `mb` MB large (third machine vs rsync of that repo): sparkctl's
    constant is the same at any size, so the ratio shows where it stops mattering."""
    model = f"{BIG}{mb}"
    files = {f"model-{i + 1:05d}-of-00004.safetensors": (mb << 20) // 4 for i in range(4)}
    make_fake_snapshot(Path(b.lab.node("spark1").node_root) / "hf", model, files | {"config.json": 2000})
    doc = yaml.safe_load(b.profiles["third"].read_text())
    doc["model"]["target"] = {"id": model, "revision": "main"}
    key = f"third-big{mb}"
    b.profiles[key] = b.work / f"{key}.yaml"
    b.profiles[key].write_text(yaml.safe_dump(doc, sort_keys=False))
    big_repo = f"{NODE_MOUNT}/hf/hub/models--{model.replace('/', '--')}"
    baseline = f"rsync -a -e ssh {big_repo} {b.fab['spark2']}:{NODE_MOUNT}/hf-rsync/"
    base: list[tuple[float, float]] = []
    ours: list[tuple[float, float]] = []
    for _ in range(rounds):
        b.drop_weights("spark2")
        b.sh("spark2", f"mkdir -p {NODE_MOUNT}/hf-rsync")
        base.append(b.measured(lambda: b.sh("spark1", baseline))[:2])
        b.drop_weights("spark2")
        b.forget_hashes("spark1", big_repo)
        dt, cpu, (_, rep) = b.measured(lambda: b.sparkctl("third", "pair", "--weights", profile=key))
        assert rep["results"][0]["action"] == "shipped", rep
        ours.append((dt, cpu))
    keep(out, f"big{mb}_rsync", base)
    keep(out, f"big{mb}_third", ours)
    out.setdefault("big_sizes", []).append(mb)
    b.loads[f"weights {mb} MB"] = loadavg()


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


def report(
    out: dict, args: argparse.Namespace, cpu: float, image_bytes: int, weights_bytes: int, loads: dict
) -> None:
    rows: list[tuple[str, str, str]] = []
    for p in PLACEMENTS:
        rows += _pair(out, "image_recipe", f"image_{p}", f"[{p}] full image (recipe)", ">= 1.0")
        if p == "third" and "image_third_raw" in out:
            rows += _pair(out, "image_recipe", "image_third_raw", "[third]   --no-compress (recipe)", "")
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
    for mb in out.get("big_sizes", []):
        rows += _pair(
            out, f"big{mb}_rsync", f"big{mb}_third", f"[third] first weights, {mb} MB (rsync)", ">= 1.0"
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
        "--big-weights-mb",
        default="300,600",
        help="first syncs of larger models too, MB, comma-separated (300: the size issue #14's lab had; '': skip)",
    )
    args = ap.parse_args()
    big = [int(x) for x in args.big_weights_mb.split(",") if x.strip()]
    disk = max(2048, (args.weights_mb + sum(big)) * 3 + 512)
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
        for mb in big:  # after the shaped measure: the recipe there rsyncs all of hf/
            print(f"first weights, {mb} MB ... (load average {loadavg()})", flush=True)
            bench_big_weights(b, args.rounds, out, mb)
        bench_primitives(b, out)
        busy = cpu.busy()
        b.loads["the run"] = loadavg()
    report(out, args, busy, image_bytes, weights_bytes, b.loads)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
