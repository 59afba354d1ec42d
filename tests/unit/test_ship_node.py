"""The node-side weights script, run for real (python3 subprocesses via LocalConnector, real files)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.testbed_tests.test_ship import make_fake_snapshot

from sparkctl.connectors.local import LocalConnector
from sparkctl.facts.hfcache import repo_dir
from sparkctl.profile.schema import ModelRef
from sparkctl.ship import ByteCounter, snapshot_manifest
from sparkctl.ship._node import frame
from sparkctl.ship.manifest import node_argv
from sparkctl.ship.weights import ship_weights

MODEL = "org/model"
REF = ModelRef(id=MODEL, revision="main")


@pytest.fixture
def nodes(tmp_path: Path) -> tuple[Path, Path]:
    src, dst = tmp_path / "n1-hf", tmp_path / "n2-hf"
    files = {"config.json": 300, "model-00001.safetensors": 300_000, "model-00002.safetensors": 200_000}
    make_fake_snapshot(src, MODEL, files | {"sub/tokenizer.json": 5000})
    dst.mkdir()
    return src, dst


def _ship(src: Path, dst: Path):  # noqa: ANN202
    conn1, conn2 = LocalConnector("n1"), LocalConnector("n2")
    source = snapshot_manifest(conn1, str(src), REF, lazy=True)
    counter = ByteCounter()
    return ship_weights(source, conn1, conn2, str(dst), counter), counter


def test_manifest_hashes_content_and_caches_it(nodes: tuple[Path, Path]) -> None:
    src, _ = nodes
    m = snapshot_manifest(LocalConnector("n1"), str(src), REF)
    repo = Path(repo_dir(str(src), MODEL))
    assert m.present and m.hashed and m.commit == (repo / "refs" / "main").read_text()
    assert set(m.files) == {
        "config.json",
        "model-00001.safetensors",
        "model-00002.safetensors",
        "sub/tokenizer.json",
    }
    for rel, entry in m.files.items():
        data = (repo / "snapshots" / m.commit / rel).read_bytes()
        assert entry.sha256 == hashlib.sha256(data).hexdigest() and entry.size == len(data) and entry.blob

    # Same size, mtime and inode: the cached hash stands (computed once), even for changed bytes.
    blob = repo / "blobs" / m.files["config.json"].blob
    st = blob.stat()
    with open(blob, "r+b") as fh:
        fh.write(b"X")
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (
        snapshot_manifest(LocalConnector("n1"), str(src), REF).files["config.json"] == m.files["config.json"]
    )
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert (
        snapshot_manifest(LocalConnector("n1"), str(src), REF).files["config.json"].sha256
        != m.files["config.json"].sha256
    )


def test_lazy_manifest_reports_only_cached_hashes(nodes: tuple[Path, Path]) -> None:
    src, _ = nodes
    lazy = snapshot_manifest(LocalConnector("n1"), str(src), REF, lazy=True)
    assert not lazy.hashed and {f.sha256 for f in lazy.files.values()} == {None}
    full = snapshot_manifest(LocalConnector("n1"), str(src), REF)
    assert snapshot_manifest(LocalConnector("n1"), str(src), REF, lazy=True).files == full.files


def test_missing_revision_is_not_present(nodes: tuple[Path, Path]) -> None:
    src, _ = nodes
    m = snapshot_manifest(LocalConnector("n1"), str(src), ModelRef(id=MODEL, revision="v2"))
    assert m.commit is None and not m.present


def test_ship_copies_verifies_marks_and_then_skips(nodes: tuple[Path, Path]) -> None:
    src, dst = nodes
    res, counter = _ship(src, dst)
    assert res.action == "shipped" and res.files_sent == 4 and res.files_kept == 0
    a = snapshot_manifest(LocalConnector("n1"), str(src), REF)
    b = snapshot_manifest(LocalConnector("n2"), str(dst), REF)
    assert a.files == b.files and b.complete and res.digest == a.digest
    repo2 = Path(repo_dir(str(dst), MODEL))
    assert (repo2 / "snapshots" / a.commit / "sub" / "tokenizer.json").is_symlink()
    assert (repo2 / "refs" / "main").read_text() == a.commit
    assert counter.sent["n2:" + MODEL] >= 505_000

    again, counter2 = _ship(src, dst)
    assert again.action == "skipped" and counter2.sent["n2:" + MODEL] == 0


def test_corrupted_peer_file_of_equal_size_is_sent_again(nodes: tuple[Path, Path]) -> None:
    src, dst = nodes
    _ship(src, dst)
    b = snapshot_manifest(LocalConnector("n2"), str(dst), REF)
    blob = Path(repo_dir(str(dst), MODEL)) / "blobs" / b.files["model-00002.safetensors"].blob
    blob.write_bytes(os.urandom(blob.stat().st_size))  # same size: a size-only check would pass
    res, _ = _ship(src, dst)
    assert res.action == "shipped" and res.files_sent == 1 and res.files_kept == 3
    assert snapshot_manifest(LocalConnector("n2"), str(dst), REF).complete


def test_marker_alone_missing_is_repaired_without_copying(nodes: tuple[Path, Path]) -> None:
    src, dst = nodes
    first, _ = _ship(src, dst)
    (Path(repo_dir(str(dst), MODEL)) / ".sparkctl" / f"{first.commit}.complete").unlink()
    res, counter = _ship(src, dst)
    assert res.action == "repaired" and res.bytes_sent == 0 and counter.sent["n2:" + MODEL] == 0
    assert snapshot_manifest(LocalConnector("n2"), str(dst), REF).complete


def test_truncated_stream_leaves_no_file_that_looks_complete(nodes: tuple[Path, Path]) -> None:
    src, dst = nodes
    a = snapshot_manifest(LocalConnector("n1"), str(src), REF)
    repo1, repo2 = Path(repo_dir(str(src), MODEL)), Path(repo_dir(str(dst), MODEL))
    big = sorted(a.files.values(), key=lambda f: -f.size)[0]
    send = subprocess.run(
        node_argv("send", str(repo1)), input=json.dumps({"paths": [f"blobs/{big.blob}"]}).encode(),
        capture_output=True, check=True,
    )  # fmt: skip
    plan = {
        "commit": a.commit,
        "revision": "main",
        "files": {r: [f.sha256, f.size, f.blob] for r, f in a.files.items()},
    }
    cut = frame({"plan": plan}) + send.stdout[: len(send.stdout) // 2]
    recv = subprocess.run(node_argv("recv", str(repo2)), input=cut, capture_output=True)
    assert recv.returncode == 3 and json.loads(recv.stderr.decode().splitlines()[-1])["error"] == "truncated"
    assert not (repo2 / "blobs" / big.blob).exists()
    assert not list(repo2.rglob("*.sparkctl-part")) and not list(repo2.rglob("*.complete"))


def test_paths_outside_the_repo_are_refused(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", node_argv("probe", "x")[2], "probe", str(tmp_path)],
        input=json.dumps({"paths": ["blobs/../../etc/passwd"]}).encode(), capture_output=True,
    )  # fmt: skip
    assert proc.returncode != 0 and b"unsafe path" in proc.stderr
