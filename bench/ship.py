"""Benchmark `sparkctl ship` against the reference recipe's commands, in the same run, on a testbed.

    python bench/ship.py [--pad-mb 400] [--weights-mb 300] [--rounds 2]   (root, repo root)

Brings up its own 2-node lab. sparkctl runs ON spark1 (spark1 is `address: local` in its profile,
as on a real head node); the baselines run on spark1 too:
  - image:   `docker save IMG | ssh spark2 docker load`  (recipe)  vs  `sparkctl ship --image`
  - weights: `rsync -a <hf>/ spark2:<dir>/`              (recipe)  vs  `sparkctl ship --weights`
Prints each measurement and four ratios with their targets:
  full image throughput ratio (>= 0.9), re-ship-unchanged speed-up (>= 50x), overlay bytes on the
  wire vs a full save (<= 10 %), first weights sync time ratio vs rsync (>= 0.9).
Times are the best of --rounds alternated runs (the machine is shared; alternating spreads noise).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
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


def _sh(lab: Lab, node: str, script: str, timeout: float = 600) -> float:
    """Run a shell script inside the node (its own engine as DOCKER_HOST); returns wall seconds."""
    env = ["env", f"DOCKER_HOST={lab.node(node).docker_host}"]
    t0 = time.monotonic()
    proc = lab.exec(node, [*env, "sh", "-c", script], check=False, timeout=timeout)
    dt = time.monotonic() - t0
    if proc.returncode:
        raise SystemExit(f"{node}: {script!r} failed: {proc.stderr.strip()[-800:]}")
    return dt


def _sparkctl(lab: Lab, profile: Path, *args: str) -> tuple[float, dict]:
    """`sparkctl ship` run on spark1 against spark1's own engine (it is the local node)."""
    n1 = lab.node("spark1")
    argv = [
        "env", f"DOCKER_HOST={n1.docker_host}", f"PYTHONPATH={ROOT / 'src'}",
        sys.executable, "-m", "sparkctl", "ship", "tp2", "-p", str(profile), "--json", *args,
    ]  # fmt: skip
    t0 = time.monotonic()
    proc = lab.exec("spark1", argv, check=False, timeout=600)
    dt = time.monotonic() - t0
    if proc.returncode:
        raise SystemExit(f"sparkctl ship failed ({proc.returncode}): {proc.stderr.strip()[-1500:]}")
    return dt, json.loads(proc.stdout)


def _drop_image(lab: Lab, node: str, *refs: str) -> None:
    client = lab.docker(node)
    for ref in refs:
        with contextlib.suppress(Exception):  # absent is fine
            client.images.remove(ref, force=True)
    client.images.prune(filters={"dangling": False})


def _save_size(lab: Lab, node: str, ref: str) -> int:
    return sum(len(c) for c in lab.docker(node).api.get_image(ref, chunk_size=1 << 20))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pad-mb", type=int, default=400, help="size of the image's big random layer")
    ap.add_argument("--weights-mb", type=int, default=300, help="size of the fake model snapshot")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()

    with Lab(nodes=2, disk_mb=max(2048, args.weights_mb * 3 + 512)) as lab:
        work = Path(lab.data_dir) / "bench"
        work.mkdir()
        cfg = lab.ssh_config
        doc = lab_profile(lab, image=IMAGE)
        doc["nodes"][0]["address"] = "local"
        doc["model"]["target"] = {"id": MODEL, "revision": "main"}
        doc["model"]["draft"] = None
        profile = work / "profile.yaml"
        profile.write_text(yaml.safe_dump(doc, sort_keys=False))
        over = dict(doc, image={"ref": OVERLAY})
        profile_overlay = work / "profile-overlay.yaml"
        profile_overlay.write_text(yaml.safe_dump(over, sort_keys=False))

        print(f"building a {args.pad_mb} MB image on spark1 ...", flush=True)
        build_engine_image(lab.docker("spark1"), tag=IMAGE, pad_mb=args.pad_mb)
        full_bytes = _save_size(lab, "spark1", IMAGE)

        # 1. full image, nothing on the peer
        base_t, ship_t = [], []
        for _ in range(args.rounds):
            _drop_image(lab, "spark2", IMAGE)
            base_t.append(_sh(lab, "spark1", f"docker save {IMAGE} | ssh -F {cfg} spark2 docker load -q"))
            _drop_image(lab, "spark2", IMAGE)
            dt, rep = _sparkctl(lab, profile, "--image")
            assert rep["results"][0]["action"] == "shipped", rep
            ship_t.append(dt)
        full_ratio = min(base_t) / min(ship_t)

        # 2. re-ship unchanged: the recipe copies it all again; sparkctl compares IDs
        again_base = _sh(lab, "spark1", f"docker save {IMAGE} | ssh -F {cfg} spark2 docker load -q")
        again_t, rep = _sparkctl(lab, profile, "--image")
        assert rep["bytes_sent"] == 0, rep
        noop_ratio = again_base / again_t

        # 3. an overlay on the image the peer now has
        build_overlay_image(lab.docker("spark1"), IMAGE, OVERLAY, extra_kb=1024)
        overlay_full = _save_size(lab, "spark1", OVERLAY)
        _, rep = _sparkctl(lab, profile_overlay, "--image")
        overlay_sent = rep["bytes_sent"]
        assert lab.docker("spark2").images.get(OVERLAY).id == lab.docker("spark1").images.get(OVERLAY).id

        # 4. first weights sync vs rsync -a
        n1, n2 = lab.node("spark1"), lab.node("spark2")
        hf1 = Path(n1.node_root) / "hf"
        n_files = 4
        files = {f"model-{i + 1:05d}-of-{n_files:05d}.safetensors": (args.weights_mb << 20) // n_files
                 for i in range(n_files)} | {"config.json": 2000, "tokenizer.json": 300_000}  # fmt: skip
        make_fake_snapshot(hf1, MODEL, files)
        repo1 = hf1 / "hub" / ("models--" + MODEL.replace("/", "--"))
        rsync_t, sync_t = [], []
        for _ in range(args.rounds):
            shutil.rmtree(Path(n2.node_root) / "hf-rsync", ignore_errors=True)
            rsync_t.append(
                _sh(
                    lab,
                    "spark1",
                    f"rsync -a -e 'ssh -F {cfg}' {NODE_MOUNT}/hf/ spark2:{NODE_MOUNT}/hf-rsync/",
                )
            )
            shutil.rmtree(Path(n2.node_root) / "hf", ignore_errors=True)
            shutil.rmtree(repo1 / ".sparkctl", ignore_errors=True)  # first sync: hash everything again
            dt, rep = _sparkctl(lab, profile, "--weights")
            assert rep["results"][0]["action"] == "shipped", rep
            sync_t.append(dt)
        weights_ratio = min(rsync_t) / min(sync_t)

    rows = [
        ("full image: recipe save|ssh load (s)", f"{min(base_t):.2f}", ""),
        ("full image: sparkctl ship --image (s)", f"{min(ship_t):.2f}", ""),
        ("full image throughput ratio (sparkctl/recipe)", f"{full_ratio:.2f}", ">= 0.9"),
        ("re-ship unchanged: recipe (s)", f"{again_base:.2f}", ""),
        ("re-ship unchanged: sparkctl (s)", f"{again_t:.2f}", ""),
        ("re-ship unchanged speed-up", f"{noop_ratio:.1f}x", ">= 50x"),
        ("overlay: full save bytes", f"{overlay_full}", ""),
        ("overlay: sparkctl bytes on the wire", f"{overlay_sent}", ""),
        ("overlay bytes vs full save", f"{100 * overlay_sent / overlay_full:.2f} %", "<= 10 %"),
        ("weights: rsync -a (s)", f"{min(rsync_t):.2f}", ""),
        ("weights: sparkctl ship --weights (s)", f"{min(sync_t):.2f}", ""),
        ("first weights sync time ratio (rsync/sparkctl)", f"{weights_ratio:.2f}", ">= 0.9"),
    ]
    print(f"\nimage {args.pad_mb} MB pad ({full_bytes / 1e6:.0f} MB saved), weights {args.weights_mb} MB, "
          f"best of {args.rounds}")  # fmt: skip
    for name, value, target in rows:
        print(f"  {name:<50} {value:>14}  {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
