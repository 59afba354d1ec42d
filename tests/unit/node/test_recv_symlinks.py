"""The weights receiver (node program, run for real as a subprocess): it writes into an HF cache a
container mounts read-write as root, so every symlink planted there is refused or replaced, never
written through; a file that fails its hash is removed."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from sparkctl.connectors.local import LocalConnector
from sparkctl.facts.hfcache import repo_dir
from sparkctl.node.base import frame
from sparkctl.node.pack import node_argv
from sparkctl.profile.schema import ModelRef
from sparkctl.ship import ByteCounter, snapshot_manifest
from sparkctl.ship.hop import Transfers
from sparkctl.ship.weights import WeightsPeer, ship_weights
from tests.testbed_tests.test_ship import make_fake_snapshot

MODEL = "org/model"
REF = ModelRef(id=MODEL, revision="main")
PRECIOUS = b"the node user's own file\n"


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file of the node user a container would like to overwrite (e.g. ~/.bashrc)."""
    path = tmp_path / "victim"
    path.write_bytes(PRECIOUS)
    path.chmod(0o600)
    return path


def _plan(hf: Path) -> tuple[Path, dict]:
    m = snapshot_manifest(LocalConnector("n"), str(hf), REF)
    files = {rel: [f.sha256, f.size, f.blob] for rel, f in m.files.items()}
    return Path(repo_dir(str(hf), MODEL)), {"commit": m.commit, "revision": "main", "files": files}


def _finish(repo: Path, plan: dict) -> subprocess.CompletedProcess:
    req = {"plan": plan, "written": {}, "ranged": {}}
    return subprocess.run(node_argv("finish", str(repo)), input=json.dumps(req).encode(), capture_output=True)


def test_finish_replaces_symlinks_planted_as_its_part_files(tmp_path: Path, victim: Path) -> None:
    hf = tmp_path / "hf"
    make_fake_snapshot(hf, MODEL, {"config.json": 300, "w.safetensors": 4000})
    repo, plan = _plan(hf)
    (repo / "refs" / "main").unlink()
    (repo / "refs" / "main.sparkctl-part").symlink_to(victim)
    (repo / ".sparkctl").mkdir()
    (repo / ".sparkctl" / f"{plan['commit']}.complete.sparkctl-part").symlink_to(victim)
    res = _finish(repo, plan)
    assert res.returncode == 0 and json.loads(res.stdout)["ok"], res.stderr
    assert victim.read_bytes() == PRECIOUS and victim.stat().st_mode & 0o777 == 0o600
    ref = repo / "refs" / "main"
    assert not ref.is_symlink() and ref.read_text() == plan["commit"]
    marker = repo / ".sparkctl" / f"{plan['commit']}.complete"
    assert not marker.is_symlink() and marker.stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("planted", ["refs", ".sparkctl"])
def test_finish_refuses_a_directory_swapped_for_a_symlink(tmp_path: Path, planted: str) -> None:
    hf, outside = tmp_path / "hf", tmp_path / "outside"
    outside.mkdir()
    make_fake_snapshot(hf, MODEL, {"w.safetensors": 4000})
    repo, plan = _plan(hf)
    if planted == "refs":  # refs/main gets written
        (repo / "refs" / "main").unlink()
        (repo / "refs").rmdir()
    (repo / planted).symlink_to(outside)
    res = _finish(repo, plan)
    assert res.returncode != 0
    assert list(outside.iterdir()) == []


def test_a_part_symlink_in_a_directory_walk_is_refused_on_receive(tmp_path: Path, victim: Path) -> None:
    """snapshots/<commit>/sub swapped for a link to another directory of the repo (inside it, so
    the name check passes): the walk by descriptor refuses it; nothing lands behind it."""
    repo = tmp_path / "repo"
    commit = "1" * 40
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "elsewhere").mkdir()
    (repo / "snapshots" / commit / "sub").symlink_to(repo / "elsewhere")
    stream = frame({"path": f"snapshots/{commit}/sub/x.json", "size": 3}) + b"abc" + frame({"end": True})
    res = subprocess.run(node_argv("recv", str(repo)), input=stream, capture_output=True)
    assert res.returncode == 4 and json.loads(res.stderr.decode().splitlines()[-1])["error"] == "unsafe"
    assert list((repo / "elsewhere").iterdir()) == []


@pytest.mark.parametrize(
    ("mode", "end"),
    [
        # the source read other bytes than its manifest says (the file changed): its own sha256 of them
        ([], lambda blob, wrong, right: {"sent": {f"blobs/{blob}": hashlib.sha256(wrong).hexdigest()}}),
        # a stream that ends without the file's sha256: nothing vouches for the bytes
        ([], lambda blob, wrong, right: {}),
        # `ship --verify`: the receiver hashes what arrived itself, whatever the stream claims
        (["verify"], lambda blob, wrong, right: {"sent": {f"blobs/{blob}": right}}),
    ],
    ids=["source-read-other-bytes", "no-digest", "verify-on-arrival"],
)
def test_a_received_file_that_fails_its_hash_is_removed(tmp_path: Path, mode: list[str], end) -> None:
    hf = tmp_path / "hf"
    make_fake_snapshot(hf, MODEL, {"w.safetensors": 4000})
    repo, plan = _plan(hf)
    (sha, size, blob) = plan["files"]["w.safetensors"]
    blob_path = repo / "blobs" / blob
    blob_path.unlink()
    wrong = os.urandom(size)  # what a broken or hostile stream delivered under that name
    stream = (
        frame({"path": f"blobs/{blob}", "size": size}) + wrong + frame({"end": True, **end(blob, wrong, sha)})
    )
    argv = node_argv("recv", str(repo), plan["commit"], "spark2", *mode)
    recv = subprocess.run(argv, input=stream, capture_output=True)
    assert recv.returncode == 0, recv.stderr
    written = json.loads(recv.stdout)["written"]
    assert written[f"blobs/{blob}"] != sha
    if mode:
        assert written == {f"blobs/{blob}": hashlib.sha256(wrong).hexdigest()}
    req = {"plan": plan, "written": written, "ranged": {}}
    fin = subprocess.run(node_argv("finish", str(repo)), input=json.dumps(req).encode(), capture_output=True)
    assert json.loads(fin.stdout)["mismatch"] == ["w.safetensors"]
    assert not blob_path.exists() and not (repo / "snapshots" / plan["commit"] / "w.safetensors").is_symlink()
    assert not (repo / ".sparkctl" / f"{plan['commit']}.complete").exists()


def test_the_sender_refuses_a_blob_swapped_for_a_symlink_after_the_manifest(tmp_path: Path) -> None:
    """The source's blob becomes a link to a secret of the node user after the manifest was taken:
    the secret is never sent (the old sender opened the resolved path and shipped the secret)."""
    src, dst = tmp_path / "n1-hf", tmp_path / "n2-hf"
    make_fake_snapshot(src, MODEL, {"w.safetensors": 4000})
    dst.mkdir()
    conn1, conn2 = LocalConnector("n1"), LocalConnector("n2")
    source = snapshot_manifest(conn1, str(src), REF, lazy=True)
    secret = tmp_path / "id_ed25519"
    secret.write_bytes(b"S" * 4000)  # same size: nothing else would notice
    blob = Path(repo_dir(str(src), MODEL)) / "blobs" / source.files["w.safetensors"].blob
    blob.unlink()
    blob.symlink_to(secret)
    out = ship_weights(
        source, conn1, [WeightsPeer(conn2, str(dst), [])], ByteCounter(), transfers=Transfers()
    )
    assert isinstance(out["n2"], Exception)
    received = [p for p in dst.rglob("*") if p.is_file() and not p.is_symlink()]
    assert all(b"SSSS" not in p.read_bytes() for p in received)


def test_by_default_the_receiver_records_the_sources_sha256_and_hashes_nothing(tmp_path: Path) -> None:
    """The bytes are hashed once, where they are read: without `verify` the digest recorded for a
    file is the one the stream's end line carries (here one no bytes have, so a second hash on the
    peer would show), for a whole file and for each range."""
    repo = tmp_path / "repo"
    repo.mkdir()
    commit, data = "2" * 40, os.urandom(5000)
    whole, ranged = f"snapshots/{commit}/a.json", f"snapshots/{commit}/b.bin"
    claimed = {whole: "a" * 64, ranged: {"0": "b" * 64, "3000": "c" * 64}}
    stream = (
        frame({"path": whole, "size": 5000})
        + data
        + frame({"path": ranged, "size": 3000, "offset": 0, "total": 5000})
        + data[:3000]
        + frame({"path": ranged, "size": 2000, "offset": 3000, "total": 5000})
        + data[3000:]
        + frame({"end": True, "sent": {whole: claimed[whole]}, "pieces": {ranged: claimed[ranged]}})
    )
    res = subprocess.run(node_argv("recv", str(repo), commit, "spark2"), input=stream, capture_output=True)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["written"] == {whole: claimed[whole]}
    assert doc["pieces"] == {ranged: claimed[ranged]}
    assert (repo / whole).read_bytes() == data  # the bytes themselves landed as sent
    assert (repo / f"{ranged}.sparkctl-part").read_bytes() == data


def test_ship_verify_asks_every_receiver_to_hash_on_arrival(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ship --verify` (deep) puts `verify` on each peer's `recv`; a plain ship does not."""
    import sparkctl.ship.weights_push as weights_push

    src = tmp_path / "n1-hf"
    make_fake_snapshot(src, MODEL, {"w.safetensors": 4000})
    chains: list[list[str]] = []

    def capture(_src, _op, req, *_args):
        chains.append(req["chain"][0]["cmd"])
        raise RuntimeError("captured")

    monkeypatch.setattr(weights_push, "run_push", capture)
    for deep in (False, True):
        dst = tmp_path / f"n2-hf-{deep}"
        dst.mkdir()
        conn1, conn2 = LocalConnector("n1"), LocalConnector("n2")
        source = snapshot_manifest(conn1, str(src), REF, lazy=not deep, deep=deep)
        with pytest.raises(RuntimeError, match="captured"):
            ship_weights(
                source,
                conn1,
                [WeightsPeer(conn2, str(dst), [])],
                ByteCounter(),
                transfers=Transfers(),
                deep=deep,
            )
    assert [cmd[-1] == "verify" for cmd in chains] == [False, True]
    assert chains[0][-1] == "n2" and chains[1][-2:] == ["n2", "verify"]
