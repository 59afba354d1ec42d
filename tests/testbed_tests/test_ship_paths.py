"""`sparkctl ship` node to node on the real testbed: the controller (this process, on the lab's mgmt
bridge) only orchestrates; any node can be the source; quick check vs --verify/--deep; names and
symlinks leading out of the cache refused; Ctrl-C stops every transfer and a rerun resumes."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sparkctl.profile.schema import Profile
from tests.testbed.images import ENGINE_TAG, build_overlay_image
from tests.testbed.lab import Lab
from tests.testbed.profiles import lab_profile
from tests.testbed_tests.test_ship import (
    _hf,
    _intact_blobs,
    _manifests,
    _profile_for,
    _repo,
    _ship,
    make_fake_snapshot,
)

pytestmark = pytest.mark.testbed


def _controller_bytes(lab: Lab) -> int:
    """Bytes in and out of the controller on the lab's management bridge (its only link to the nodes)."""
    stats = Path("/sys/class/net", lab.mgmt_bridge, "statistics")
    return int((stats / "rx_bytes").read_text()) + int((stats / "tx_bytes").read_text())


def _node_rx(lab: Lab, node: str) -> int:
    n = lab.node(node)
    return int(lab.exec(node, ["cat", f"/sys/class/net/{n.fabric_netdev}/statistics/rx_bytes"]).stdout)


def _write(lab: Lab, tmp_path: Path, model: dict | None = None, **kw) -> Path:
    doc = lab_profile(lab, **kw)
    if model is not None:
        doc["model"].update(model)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _cli(path: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparkctl", *args, "-p", str(path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_both_nodes_remote_data_goes_node_to_node_over_the_fabric(lab: Lab) -> None:
    tag = "sparkctl-test/ship-direct:1"
    build_overlay_image(lab.docker("spark1"), ENGINE_TAG, tag, extra_kb=12 << 10)
    target = "direct/target"
    make_fake_snapshot(_hf(lab, "spark1"), target, {"a.safetensors": 16 << 20, "config.json": 400})
    profile = _profile_for(lab, image=tag, target=target, draft=None)
    before, rx_before = _controller_bytes(lab), _node_rx(lab, "spark2")
    report, _ = _ship(profile)
    through_controller = _controller_bytes(lab) - before
    moved = report.bytes_sent
    assert report.ok and moved > 28 << 20
    assert _node_rx(lab, "spark2") - rx_before > moved  # it arrived over spark2's fabric netdev
    # Only orchestration (the node program, JSON states, progress lines) crosses the controller's link.
    assert through_controller < moved * 0.05, (through_controller, moved)
    assert {r.source for r in report.results} == {"spark1"}


def _fresh_image(lab: Lab, node: str, tag: str, size: int) -> str:
    """An image none of whose layers any other engine has: `docker import` of random bytes."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("opt/blob.bin")
        info.size = size
        tar.addfile(info, io.BytesIO(os.urandom(size)))
    repo, version = tag.rsplit(":", 1)
    lab.docker(node).api.import_image_from_data(buf.getvalue(), repository=repo, tag=version)
    return lab.docker(node).images.get(tag).id


def test_whole_image_goes_from_the_engine_straight_to_the_peers_engine(lab: Lab) -> None:
    """No layer to drop: the source's ssh reads `docker save` from the engine's socket, the peer's
    loader (no docker CLI) hands it to its engine; the image arrives whole with the same ID."""
    tag = "sparkctl-test/ship-whole:1"
    image_id = _fresh_image(lab, "spark1", tag, 6 << 20)
    profile = _profile_for(lab, image=tag, draft=None)
    report, counter = _ship(profile, weights=False)
    (img,) = report.results
    assert report.ok and img.action == "shipped" and img.layers_skipped == 0 and img.bytes_sent >= 6 << 20
    assert lab.docker("spark2").images.get(tag).id == image_id
    assert sum(counter.sent.values()) > 6 << 20  # progress came from the ssh client's reads


def test_peer_loader_reports_the_engines_refusal(lab: Lab) -> None:
    """A stream the peer's engine cannot load: exit 1 and the engine's message, like `docker load`."""
    from sparkctl.node.pack import load_argv
    from sparkctl.ship.hop import hop_argv

    argv = [*hop_argv(_profile_for(lab), "spark2"), shlex.join(load_argv())]
    proc = lab.exec("spark1", argv, check=False, input="this is not an image archive\n" * 100)
    assert proc.returncode == 1 and "Error response from daemon" in proc.stderr, proc.stderr


def test_save_of_an_image_the_engine_lacks_is_its_error_not_a_stream(lab: Lab) -> None:
    """The source reads `docker save` from its engine's API: a refusal is an error with the
    engine's message (reported as the source's), never an empty stream sent to the peers."""
    src = Path(__file__).resolve().parents[2] / "src"
    code = (
        "from sparkctl.node.docker_api import SaveStream; s = SaveStream('sparkctl-test/absent:1', None); "
        "print(s.fd, s.finish())"
    )
    n1 = lab.node("spark1")
    out = lab.exec(
        "spark1", ["env", f"DOCKER_HOST={n1.docker_host}", f"PYTHONPATH={src}", sys.executable, "-c", code]
    )
    # no stream, and the engine's own words (Docker 20.10: "reference does not exist")
    assert out.stdout.startswith("None (1, ") and ("does not exist" in out.stdout or "No such" in out.stdout)


def test_any_node_holding_the_item_is_the_source(lab: Lab) -> None:
    tag = "sparkctl-test/ship-on2:1"
    image_id = build_overlay_image(lab.docker("spark2"), ENGINE_TAG, tag, extra_kb=256)
    target = "on2/target"
    make_fake_snapshot(_hf(lab, "spark2"), target, {"w.safetensors": 1 << 20, "config.json": 300})
    profile = _profile_for(lab, image=tag, target=target, draft=None)
    report, _ = _ship(profile)  # no --from: spark1 (rank 0) lacks both, spark2 has them
    assert report.ok and {(r.node, r.source) for r in report.results} == {("spark1", "spark2")}
    assert lab.docker("spark1").images.get(tag).id == image_id
    m = _manifests(lab, profile, profile.model.target)
    assert m["spark1"].complete and m["spark1"].digest == m["spark2"].digest


def test_tamper_same_size_same_mtime_quick_check_vs_deep(lab: Lab, tmp_path: Path) -> None:
    target = "tamper/target"
    make_fake_snapshot(_hf(lab, "spark1"), target, {"w.safetensors": 2 << 20, "config.json": 300})
    path = _write(lab, tmp_path, model={"target": {"id": target, "revision": "main"}, "draft": None})
    first = _cli(path, "ship", "tp2", "--weights")
    assert first.returncode == 0, first.stderr
    blob = next(p for p in (_repo(lab, "spark2", target) / "blobs").iterdir() if p.stat().st_size == 2 << 20)
    st = blob.stat()
    with open(blob, "r+b") as fh:  # in place: same inode, same size; then the mtime put back
        fh.write(b"tampered!")
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))

    quick = _cli(path, "ship", "tp2", "--weights")
    assert quick.returncode == 0 and "already identical (quick check: size+mtime+inode" in quick.stdout
    pf = _cli(path, "preflight", "tp2", "--only", "WeightsContent", "--json")
    ok = [f for f in json.loads(pf.stdout)["findings"] if f["check"] == "WeightsContent"]
    assert pf.returncode == 0 and all("quick check" in f["message"] for f in ok if f["severity"] == "ok")
    deep = _cli(path, "preflight", "tp2", "--only", "WeightsContent", "--deep", "--json")
    bad = [f for f in json.loads(deep.stdout)["findings"] if f["severity"] == "error"]
    assert deep.returncode == 1 and bad and "w.safetensors" in bad[0]["message"]

    fixed = _cli(path, "ship", "tp2", "--weights", "--verify", "--json")
    assert fixed.returncode == 0, fixed.stderr
    (res,) = json.loads(fixed.stdout)["results"]
    assert res["action"] == "shipped" and res["files_sent"] == 1 and res["check"] == "deep"
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name
    assert _cli(path, "preflight", "tp2", "--only", "WeightsContent", "--deep").returncode == 0


def test_source_symlink_out_of_the_cache_is_refused(lab: Lab, tmp_path: Path) -> None:
    target = "outside/target"
    commit = make_fake_snapshot(_hf(lab, "spark1"), target, {"config.json": 300})
    secret = Path(lab.node("spark1").node_root) / "secret.txt"
    secret.write_text("not model data\n")
    (_repo(lab, "spark1", target) / "snapshots" / commit / "tokenizer.json").symlink_to(secret)
    path = _write(lab, tmp_path, model={"target": {"id": target, "revision": "main"}, "draft": None})
    proc = _cli(path, "ship", "tp2", "--weights")
    assert (
        proc.returncode == 3
        and "leading out of the HF cache" in proc.stderr
        and "Traceback" not in proc.stderr
    )
    assert "tokenizer.json" in proc.stderr and not _repo(lab, "spark2", target).exists()


def test_receiver_on_the_peer_refuses_traversal_names(lab: Lab) -> None:
    from sparkctl.node.base import frame
    from sparkctl.node.pack import node_argv
    from sparkctl.ship.hop import hop_argv

    repo = "/srv/sparknode/hf/hub/models--evil--x"
    profile = Profile.model_validate(lab_profile(lab))
    for name in ("blobs/../../../../etc/evil", f"snapshots/{'0' * 40}/../../../../tmp/evil", "/tmp/evil"):
        stream = frame({"path": name, "size": 4}) + b"evil" + frame({"end": True})
        # A crafted stream from spark1 over the node-to-node SSH path, as a hostile source would send.
        argv = [*hop_argv(profile, "spark2"), shlex.join(node_argv("recv", repo))]
        proc = lab.exec("spark1", argv, check=False, input=stream.decode("latin-1"))
        assert proc.returncode == 4 and '"unsafe"' in proc.stderr, proc.stderr
    assert not Path(lab.node("spark2").node_root, "hf", "hub", "models--evil--x").exists()


def _transfer_pids(lab: Lab) -> list[int]:
    """Processes of a push (source) or a receive (peer) still running on any lab node."""
    from tests.testbed.lab import _netns_pids

    found = []
    for n in lab.nodes:
        for pid in _netns_pids(n.netns):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"push-weights" in argv or b"recv" in argv or argv[:2] == [b"docker", b"save"]:
                found.append(pid)
    return found


def test_ctrl_c_stops_every_transfer_at_once_and_a_rerun_resumes(lab: Lab, tmp_path: Path) -> None:
    target = "ctrlc/target"
    files = {f"model-{i:05d}.safetensors": 8 << 20 for i in range(6)}
    make_fake_snapshot(_hf(lab, "spark1"), target, files)
    path = _write(lab, tmp_path, model={"target": {"id": target, "revision": "main"}, "draft": None})
    dev, ns = lab.node("spark2").fabric_netdev, lab.node("spark2").netns
    # A slow fabric (40 Mbit/s: ~10 s for these 48 MiB), so the transfer is surely mid-way.
    subprocess.run(
        [
            "tc",
            "-n",
            ns,
            "qdisc",
            "add",
            "dev",
            dev,
            "root",
            "tbf",
            "rate",
            "40mbit",
            "burst",
            "64kb",
            "latency",
            "50ms",
        ],
        check=True,
    )
    repo = _repo(lab, "spark2", target)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sparkctl", "ship", "tp2", "--weights", "-p", str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while not (repo.exists() and list(repo.rglob("*.sparkctl-part"))):
            assert proc.poll() is None and time.monotonic() < deadline, (
                proc.stderr.read() if proc.stderr else ""
            )
            time.sleep(0.05)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        exited = time.monotonic() - t0
        while _transfer_pids(lab):
            assert time.monotonic() - t0 < 10, _transfer_pids(lab)
            time.sleep(0.05)
        stopped = time.monotonic() - t0
    finally:
        subprocess.run(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"], check=False)
    print(f"Ctrl-C: sparkctl exited after {exited:.2f}s, every transfer process gone after {stopped:.2f}s")
    assert proc.returncode != 0 and "Traceback" not in (proc.stderr.read() if proc.stderr else "")
    assert not list((repo / ".sparkctl").glob("*.complete")) and not (repo / "refs" / "main").exists()
    kept = _intact_blobs(repo)  # what looks complete is complete
    # Cut short, not waited out: the old path let the whole ~10 s transfer finish first.
    assert len(kept) < len(files)
    again = _cli(path, "ship", "tp2", "--weights", "--json")
    assert again.returncode == 0, again.stderr
    (res,) = json.loads(again.stdout)["results"]
    assert res["files_kept"] == len(kept) and res["files_sent"] == len(files) - len(kept)
    profile = _profile_for(lab, target=target, draft=None)
    assert _manifests(lab, profile, profile.model.target)["spark2"].complete


def test_several_peers_get_one_pipelined_copy_from_the_source() -> None:
    """spark1 -> spark2 -> spark3: both peers get the image and the weights, and about ONE copy of
    the bytes leaves spark1 (spark2 relays to spark3 the compressed stream it also unpacks), not
    one per peer."""
    from sparkctl.connectors.pool import NodePool
    from sparkctl.planning.build import build_plan
    from sparkctl.ship import ship
    from tests.testbed.images import build_engine_image

    with Lab(nodes=3) as lab3:
        tag = "sparkctl-test/pipe:1"
        image_id = build_engine_image(lab3.docker("spark1"), tag=tag, pad_mb=24)
        target = "pipe/target"
        make_fake_snapshot(_hf(lab3, "spark1"), target, {"a.safetensors": 24 << 20, "config.json": 300})
        doc = lab_profile(
            lab3,
            image=tag,
            modes={"all": {"nodes": ["spark1", "spark2", "spark3"], "tp": 3, "default": True}},
        )
        doc["model"].update({"target": {"id": target, "revision": "main"}, "draft": None})
        profile = Profile.model_validate(doc)
        saved = sum(len(c) for c in lab3.docker("spark1").api.get_image(tag, chunk_size=1 << 20))
        n1 = lab3.node("spark1")
        stats = [
            "cat",
            "/sys/class/net/eth0/statistics/tx_bytes",
            f"/sys/class/net/{n1.fabric_netdev}/statistics/tx_bytes",
        ]

        def tx() -> int:
            return sum(int(x) for x in lab3.exec("spark1", stats).stdout.split())

        before = tx()
        with NodePool(profile) as pool:
            report = ship(profile, build_plan(profile, "all").nodes, pool)
        left_source = tx() - before
        assert report.ok and {r.node for r in report.results} == {"spark2", "spark3"}
        for node in ("spark2", "spark3"):
            assert lab3.docker(node).images.get(tag).id == image_id
        ms = {n: _manifest(lab3, profile, n) for n in ("spark1", "spark2", "spark3")}
        assert ms["spark2"].complete and ms["spark3"].complete and ms["spark3"].digest == ms["spark1"].digest
        # One copy: the image as it crossed spark1's link (zstd's output, the same push for both
        # peers) plus the weights; never less, never near two.
        images = [r for r in report.results if r.to_json()["what"] == "image"]
        assert {r.codec for r in images} == {"zstd"} and len({r.wire_bytes for r in images}) == 1
        assert images[0].wire_bytes < saved and images[0].bytes_sent >= saved * 0.9
        one_copy = images[0].wire_bytes + (24 << 20)
        assert one_copy < left_source < 1.3 * one_copy, (left_source, one_copy)


def _manifest(lab: Lab, profile: Profile, node: str):
    from sparkctl.connectors.pool import NodePool
    from sparkctl.ship import hf_cache_for, snapshot_manifest

    with NodePool(profile) as pool:
        return snapshot_manifest(pool.get(node), hf_cache_for(profile, node), profile.model.target)
