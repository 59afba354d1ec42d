"""Several peers for bench/ship.py: 1/2/4 streams, 3 peers vs 1 on the lab as it is (with its CPU
by category and the raw `docker load` primitive under it) and on a rate-limited fabric (sparkctl
against the recipe's commands run to every peer at once)."""

from __future__ import annotations

import os

from _ship_lab import CPU_PARTS, IMAGE, NODE_MOUNT, Bench, keep, loadavg, med


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


def recipe_images_script(b: Bench, peers: list[str], at_once: bool) -> str:
    """The recipe's image command from spark1 to each peer: one after another (its loop over the
    nodes), or all at once. Either way the source's link carries one copy per peer."""
    jobs = [f"docker save {IMAGE} | ssh {b.fab[peer]} docker load -q > /dev/null" for peer in peers]
    if not at_once:
        return " && ".join(jobs)
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
        # issue 44's image targets: the image alone to 1 and 3 peers against the recipe's loop
        "iship_1": lambda: b.sparkctl("third", "pair", "--image"),
        "iship_1_raw": lambda: b.sparkctl("third", "pair", "--image", "--no-compress"),
        "iship_3": lambda: b.sparkctl("third", "all4", "--image"),
        "irecipe_1": lambda: b.sh("spark1", recipe_images_script(b, peers[:1], at_once=False)),
        "irecipe_serial_3": lambda: b.sh("spark1", recipe_images_script(b, peers, at_once=False)),
        "irecipe_parallel_3": lambda: b.sh("spark1", recipe_images_script(b, peers, at_once=True)),
    }
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
    try:
        for n in b.lab.nodes:
            b.lab.set_egress_rate(n, mbit, fabric_only=True)
        for i in range(rounds):
            for case, fn in cases.items():
                if case.startswith(("naive", "irecipe_serial")) and i >= max(1, rounds - 1):
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


def shaped_rounds(rounds: int) -> int:
    """Rounds of the shaped and raw-load measures: one fewer than the others (each shaped round
    moves image+weights four times over a slow link), at least one."""
    return max(1, rounds - 1)


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
        *image_rows(out),
    ]


def image_rows(out: dict) -> list[tuple[str, str, str]]:
    """Issue 44's image targets on the capped fabric: the image alone, sparkctl against the
    recipe's `docker save | ssh | docker load` to one peer, to three one after another, at once."""
    if "shaped_iship_3" not in out:
        return []
    i1, i3 = out["shaped_iship_1"], out["shaped_iship_3"]
    r1, serial, par = (out[f"shaped_irecipe_{k}"] for k in ("1", "serial_3", "parallel_3"))
    return [
        (
            "image alone, capped fabric: recipe / sparkctl to 1 peer, wall",
            f"{r1:.2f} / {i1:.2f} = {r1 / i1:.2f}",
            ">= 1.1",
        ),
        (
            "  to 1 peer without zstd (--no-compress): recipe / sparkctl",
            f"{r1:.2f} / {out['shaped_iship_1_raw']:.2f} = {r1 / out['shaped_iship_1_raw']:.2f}",
            "",
        ),
        (
            "  to 3 peers: recipe one after another / sparkctl, wall",
            f"{serial:.2f} / {i3:.2f} = {serial / i3:.2f}",
            ">= 2.0",
        ),
        (
            "  to 3 peers: recipe all at once / sparkctl, wall",
            f"{par:.2f} / {i3:.2f} = {par / i3:.2f}",
            ">= 1.3",
        ),
        (
            "  MB leaving spark1 to 3 peers: sparkctl / recipe",
            f"{out['shaped_tx_iship_3'] / 1e6:.0f} / {out['shaped_tx_irecipe_parallel_3'] / 1e6:.0f}",
            "",
        ),
    ]
