"""The node-side weights script, run for real (python3 subprocesses via LocalConnector, real files)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkctl.connectors.local import LocalConnector
from sparkctl.facts.hfcache import repo_dir
from sparkctl.node.base import frame
from sparkctl.node.pack import node_argv, node_script
from sparkctl.profile.schema import ModelRef
from sparkctl.ship import ByteCounter, snapshot_manifest
from sparkctl.ship.hop import Transfers
from sparkctl.ship.weights import WeightsPeer, plan_streams, ship_weights
from tests.testbed_tests.test_ship import make_fake_snapshot

MODEL = "org/model"
REF = ModelRef(id=MODEL, revision="main")


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the node's hash cache lives in ~/.cache


@pytest.fixture
def nodes(tmp_path: Path) -> tuple[Path, Path]:
    src, dst = tmp_path / "n1-hf", tmp_path / "n2-hf"
    files = {"config.json": 300, "model-00001.safetensors": 300_000, "model-00002.safetensors": 200_000}
    make_fake_snapshot(src, MODEL, files | {"sub/tokenizer.json": 5000})
    dst.mkdir()
    return src, dst


def _ship(src: Path, dst: Path, streams: int = 1, deep: bool = False):
    """Source and peer are two directories here; the hop is a local pipe instead of ssh."""
    conn1, conn2 = LocalConnector("n1"), LocalConnector("n2")
    source = snapshot_manifest(conn1, str(src), REF, lazy=not deep, deep=deep)
    counter = ByteCounter()
    out = ship_weights(
        source,
        conn1,
        [WeightsPeer(conn2, str(dst), [])],
        counter,
        transfers=Transfers(),
        streams=streams,
        deep=deep,
    )
    if isinstance(out["n2"], Exception):
        raise out["n2"]
    return out["n2"], counter


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

    # Same size, mtime and inode: the quick check keeps the cached hash (like rsync), even for changed
    # bytes; a deep manifest rehashes and sees the change; a new mtime also invalidates the cache.
    blob = repo / "blobs" / m.files["config.json"].blob
    st = blob.stat()
    with open(blob, "r+b") as fh:
        fh.write(b"X")
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (
        snapshot_manifest(LocalConnector("n1"), str(src), REF).files["config.json"] == m.files["config.json"]
    )
    deep = snapshot_manifest(LocalConnector("n1"), str(src), REF, deep=True)
    assert deep.files["config.json"].sha256 == hashlib.sha256(blob.read_bytes()).hexdigest()
    assert deep.files["config.json"].sha256 != m.files["config.json"].sha256
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert (
        snapshot_manifest(LocalConnector("n1"), str(src), REF).files["config.json"].sha256
        != m.files["config.json"].sha256
    )


def test_hash_cache_is_outside_the_hf_cache(nodes: tuple[Path, Path], tmp_path: Path) -> None:
    src, _ = nodes
    snapshot_manifest(LocalConnector("n1"), str(src), REF)
    assert list((tmp_path / "home" / ".cache" / "sparkctl" / "hashes").glob("*.json"))
    assert not [p for p in src.rglob("*") if p.name.endswith(".json") and ".sparkctl" in p.parts]


def test_tampered_peer_file_same_size_same_mtime_needs_verify(nodes: tuple[Path, Path]) -> None:
    src, dst = nodes
    _ship(src, dst)
    b = snapshot_manifest(LocalConnector("n2"), str(dst), REF)
    blob = Path(repo_dir(str(dst), MODEL)) / "blobs" / b.files["model-00002.safetensors"].blob
    st = blob.stat()
    with open(blob, "r+b") as fh:  # in place: same inode and size, mtime put back
        fh.write(b"tampered")
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))
    quick, _ = _ship(src, dst)
    assert quick.action == "skipped" and quick.check == "quick"  # the quick check cannot see it
    deep, _ = _ship(src, dst, deep=True)
    assert deep.action == "shipped" and deep.files_sent == 1 and deep.check == "deep"
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name


def test_large_files_go_in_ranges_over_several_streams(
    nodes: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sparkctl.ship.weights as w

    monkeypatch.setattr(w, "RANGE_MIN", 64 << 10)
    monkeypatch.setattr(w, "ALIGN", 4096)
    src, dst = nodes
    res, counter = _ship(src, dst, streams=3)
    assert res.action == "shipped" and res.streams == 3 and counter.sent["n2:" + MODEL] >= 505_000
    a = snapshot_manifest(LocalConnector("n1"), str(src), REF)
    b = snapshot_manifest(LocalConnector("n2"), str(dst), REF, deep=True)
    assert a.files == b.files and b.complete
    assert not list(dst.rglob("*.sparkctl-part"))


def test_several_peers_get_one_pipelined_stream(nodes: tuple[Path, Path], tmp_path: Path) -> None:
    src, dst = nodes
    peers = [LocalConnector(f"p{i}") for i in range(3)]
    dirs = [dst, tmp_path / "p1-hf", tmp_path / "p2-hf"]
    source = snapshot_manifest(LocalConnector("n1"), str(src), REF, lazy=True)
    counter = ByteCounter()
    out = ship_weights(
        source,
        LocalConnector("n1"),
        [WeightsPeer(c, str(d), []) for c, d in zip(peers, dirs, strict=True)],
        counter,
        transfers=Transfers(),
        streams=2,
    )
    assert {r.action for r in out.values()} == {"shipped"}, out
    a = snapshot_manifest(LocalConnector("n1"), str(src), REF)
    for d in dirs:
        b = snapshot_manifest(LocalConnector("x"), str(d), REF, deep=True)
        assert b.files == a.files and b.complete
    assert counter.sent["p0:" + MODEL] == counter.sent["p2:" + MODEL] >= 505_000


def test_plan_streams_balances_and_cuts_large_files(monkeypatch: pytest.MonkeyPatch) -> None:
    import sparkctl.ship.weights as w

    monkeypatch.setattr(w, "RANGE_MIN", 100)
    monkeypatch.setattr(w, "ALIGN", 1)
    streams, ranged = plan_streams({"blobs/a": 1000, "blobs/b": 10, "blobs/c": 20}, 4)
    assert ranged == ["blobs/a"] and len(streams) == 4
    pieces = sorted((d, o, n) for s in streams for d, o, n in s if d == "blobs/a")
    assert sum(n for _d, _o, n in pieces) == 1000 and [o for _d, o, _n in pieces] == [0, 250, 500, 750]
    one, none = plan_streams({"blobs/a": 1000, "blobs/b": 10}, 1)
    assert none == [] and sorted(one[0]) == [("blobs/a", None, 1000), ("blobs/b", None, 10)]


def test_plan_streams_keeps_files_whole_when_they_spread_evenly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 44: four shards of about the same size over four streams go whole (each read once,
    hashed on its way); one shard much larger than the rest is still cut."""
    import sparkctl.ship.weights as w

    monkeypatch.setattr(w, "RANGE_MIN", 100)
    monkeypatch.setattr(w, "ALIGN", 1)
    shards = {"blobs/a": 1000, "blobs/b": 990, "blobs/c": 980, "blobs/d": 900, "blobs/e": 30}
    streams, ranged = plan_streams(shards, 4)
    assert ranged == [] and len(streams) == 4
    assert sorted(d for s in streams for d, off, _n in s if off is None) == sorted(shards)
    assert max(sum(n for *_x, n in s) for s in streams) <= w.BALANCED * sum(shards.values()) / 4
    _streams, ranged = plan_streams({**shards, "blobs/a": 4000}, 4)
    assert ranged == ["blobs/a"]


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
    assert {p.stat().st_mode & 0o777 for p in (repo2 / "blobs").iterdir()} == {0o644}  # 0600 until complete
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


def test_a_source_file_changed_in_place_with_a_new_mtime_is_sent_again(nodes: tuple[Path, Path]) -> None:
    """The hash cache is keyed by what can change (size, mtime, inode, device): the same inode and
    size with new bytes and a new mtime is a cache miss on the source, so a re-ship sends exactly it."""
    src, dst = nodes
    _ship(src, dst)
    a = snapshot_manifest(LocalConnector("n1"), str(src), REF)
    blob = Path(repo_dir(str(src), MODEL)) / "blobs" / a.files["config.json"].blob
    ino, st = blob.stat().st_ino, blob.stat()
    with open(blob, "r+b") as fh:  # in place: same inode, same size
        fh.write(b"{}")
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert blob.stat().st_ino == ino and blob.stat().st_size == st.st_size
    res, counter = _ship(src, dst)
    assert res.action == "shipped" and res.files_sent == 1 and res.files_kept == 3
    assert counter.sent["n2:" + MODEL] == st.st_size
    peer = Path(repo_dir(str(dst), MODEL)) / "blobs" / a.files["config.json"].blob
    assert peer.read_bytes() == blob.read_bytes()
    again, _ = _ship(src, dst)
    assert again.action == "skipped"


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
    data = (repo1 / "blobs" / big.blob).read_bytes()
    cut = frame({"path": f"blobs/{big.blob}", "size": len(data)}) + data[: len(data) // 2]
    recv = subprocess.run(node_argv("recv", str(repo2)), input=cut, capture_output=True)
    assert recv.returncode == 3 and json.loads(recv.stderr.decode().splitlines()[-1])["error"] == "truncated"
    assert not (repo2 / "blobs" / big.blob).exists()
    assert not list(repo2.rglob("*.sparkctl-part")) and not list(repo2.rglob("*.complete"))


def test_a_resend_into_a_complete_snapshot_first_drops_its_marker(nodes: tuple[Path, Path]) -> None:
    """`recv REPO COMMIT` removes the completion marker before it writes anything: a resend cut
    short leaves nothing that looks complete."""
    src, dst = nodes
    first, _ = _ship(src, dst)
    repo2 = Path(repo_dir(str(dst), MODEL))
    marker = repo2 / ".sparkctl" / f"{first.commit}.complete"
    assert marker.exists()
    big = max(snapshot_manifest(LocalConnector("n1"), str(src), REF).files.values(), key=lambda f: f.size)
    cut = frame({"path": f"blobs/{big.blob}", "size": big.size}) + b"x" * (big.size // 2)
    recv = subprocess.run(node_argv("recv", str(repo2), first.commit), input=cut, capture_output=True)
    assert recv.returncode == 3 and not marker.exists()
    assert not snapshot_manifest(LocalConnector("n2"), str(dst), REF).complete


def test_a_stale_larger_part_file_of_a_ranged_file_is_cut_to_size(
    nodes: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A part file left by an interrupted run of another version (larger) is sized to the file
    before the ranges land: the file arrives whole and verified, no leftover tail."""
    import sparkctl.ship.weights as w

    monkeypatch.setattr(w, "RANGE_MIN", 64 << 10)
    monkeypatch.setattr(w, "ALIGN", 4096)
    src, dst = nodes
    a = snapshot_manifest(LocalConnector("n1"), str(src), REF)
    big = max(a.files.values(), key=lambda f: f.size)
    stale = Path(repo_dir(str(dst), MODEL)) / "blobs" / f"{big.blob}.sparkctl-part"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(os.urandom(big.size + 12345))
    res, _ = _ship(src, dst, streams=3)
    assert res.action == "shipped" and res.streams == 3
    b = snapshot_manifest(LocalConnector("n2"), str(dst), REF, deep=True)
    assert b.files == a.files and b.complete and not stale.exists()


COMMIT = "0" * 40


@pytest.mark.parametrize(
    "name",
    [
        "blobs/../../etc/passwd",
        f"snapshots/{COMMIT}/../../../x",
        f"snapshots/{COMMIT}/a/../../b",
        "/etc/passwd",
        "blobs/notahash",
        "refs/main",
        f"snapshots/{COMMIT}/x.sparkctl-part",
        f"snapshots/{'z' * 40}/x",
    ],
)
def test_receiver_refuses_names_outside_the_hf_layout(tmp_path: Path, name: str) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    stream = frame({"path": name, "size": 3}) + b"bad" + frame({"end": True})
    proc = subprocess.run(node_argv("recv", str(repo)), input=stream, capture_output=True)
    assert proc.returncode == 4 and json.loads(proc.stderr.decode().splitlines()[-1])["error"] == "unsafe"
    written = [p.name for p in tmp_path.rglob("*") if p.relative_to(tmp_path).parts[0] != "home"]
    assert written == ["repo"]  # nothing written anywhere (HOME keeps only the compiled node program)


def test_receiver_refuses_a_symlinked_dir_leading_out(tmp_path: Path) -> None:
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    (repo / "snapshots" / COMMIT).mkdir(parents=True)
    outside.mkdir()
    (repo / "snapshots" / COMMIT / "sub").symlink_to(outside)
    stream = frame({"path": f"snapshots/{COMMIT}/sub/evil", "size": 3}) + b"bad" + frame({"end": True})
    proc = subprocess.run(node_argv("recv", str(repo)), input=stream, capture_output=True)
    assert proc.returncode == 4 and b"leads out of the cache" in proc.stderr
    assert not list(outside.iterdir())


def test_source_symlink_leading_out_of_the_cache_is_reported_not_followed(nodes: tuple[Path, Path]) -> None:
    src, _ = nodes
    m = snapshot_manifest(LocalConnector("n1"), str(src), REF)
    snap = Path(repo_dir(str(src), MODEL)) / "snapshots" / m.commit
    (snap / "evil.json").symlink_to("/etc/hostname")
    bad = snapshot_manifest(LocalConnector("n1"), str(src), REF)
    assert bad.outside == [["evil.json", "/etc/hostname"]] and not bad.present
    assert "evil.json" not in bad.files


def test_paths_outside_the_repo_are_refused(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", node_script(), "probe", str(tmp_path)],
        input=json.dumps({"paths": ["blobs/../../etc/passwd"]}).encode(),
        capture_output=True,
    )
    assert proc.returncode != 0 and b"unsafe name" in proc.stderr


def test_no_hash_cache_inside_the_hf_cache_a_container_mounts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hf = tmp_path / "home" / ".cache"  # hf_cache set to ~/.cache: ~/.cache/sparkctl would be inside it
    make_fake_snapshot(hf, MODEL, {"w.safetensors": 1000})
    m = snapshot_manifest(LocalConnector("n1"), str(hf), REF)
    assert m.hashed and not (hf / "sparkctl").exists()  # hashed every time, nothing written there


def test_node_program_is_stdlib_only_and_fits_one_remote_argument() -> None:
    import shlex

    prog = node_script()
    assert "from sparkctl" not in prog and "import sparkctl" not in prog
    # ssh hands the peer one command line; Linux caps one argument at 128 KiB (MAX_ARG_STRLEN)
    assert len(shlex.join(node_argv("recv", "/x"))) < 120_000


def test_engine_socket_is_where_the_docker_cli_would_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node program talks to the engine's socket itself only where the docker CLI would; a
    docker context or a remote DOCKER_HOST leaves it to the CLI (None)."""
    from sparkctl.node.docker_api import docker_socket

    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    assert docker_socket() == "/var/run/docker.sock"
    (tmp_path / "config.json").write_text('{"currentContext": "rootless"}')
    assert docker_socket() is None
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/other/docker.sock")  # wins over the context, as in the CLI
    assert docker_socket() == "/run/other/docker.sock"
    monkeypatch.setenv("DOCKER_HOST", "ssh://spark2")
    assert docker_socket() is None


def test_a_refused_docker_save_is_reported_as_the_sources_failure() -> None:
    """No peer got anything because the source's engine refused the save: say that, not that a
    node before the peer failed."""
    from sparkctl.ship.errors import ShipError
    from sparkctl.ship.image import Peer, SourceImage, _check

    src = SourceImage("spark1", "x:1", "sha256:" + "1" * 64, [], [])
    res = {"peers": {}, "save_rc": 1, "save_err": "No such image: x:1"}
    with pytest.raises(ShipError) as err:
        _check(res, src, Peer(LocalConnector("spark2"), {}, []), retryable=False)
    assert "docker save x:1 failed on the source" in err.value.message and err.value.node == "spark1"


def test_a_pinned_commit_ships_with_the_sources_refs_to_it(nodes: tuple[Path, Path]) -> None:
    """Issue 46: the profile pins the commit, the source's cache also has refs/main (and a tag) to
    it; the peer gets them, so `<id>` resolves offline there as on the source. A peer shipped
    before without them is repaired (no bytes sent), not skipped."""
    src, dst = nodes
    repo1 = Path(repo_dir(str(src), MODEL))
    commit = (repo1 / "refs" / "main").read_text()
    (repo1 / "refs" / "v1").write_text(commit)
    (repo1 / "refs" / "old").write_text("f" * 40)  # names another commit: not this snapshot's
    conn1, conn2 = LocalConnector("n1"), LocalConnector("n2")
    pinned = ModelRef(id=MODEL, revision=commit)
    source = snapshot_manifest(conn1, str(src), pinned)
    assert source.refs == ("main", "v1")

    def ship() -> str:
        out = ship_weights(
            source, conn1, [WeightsPeer(conn2, str(dst), [])], ByteCounter(), transfers=Transfers()
        )
        assert not isinstance(out["n2"], Exception), out["n2"]
        return out["n2"].action

    assert ship() == "shipped"
    repo2 = Path(repo_dir(str(dst), MODEL))
    assert sorted(p.name for p in (repo2 / "refs").iterdir()) == ["main", "v1"]
    assert (repo2 / "refs" / "main").read_text() == commit
    (repo2 / "refs" / "main").unlink()  # as a ship before issue 46 left it
    assert ship() == "repaired" and (repo2 / "refs" / "main").read_text() == commit
    assert ship() == "skipped"
    (repo2 / "refs" / "main").write_text(commit + "\n")  # huggingface_hub reads it unstripped: no snapshot
    assert ship() == "repaired" and (repo2 / "refs" / "main").read_bytes() == commit.encode()


def _part_of(tmp_path: Path, data: bytes, blob: str | None = None) -> tuple[str, str, str]:
    """A part file of `data` under blobs/<blob> (default: the sha256 of data, as the source has it)."""
    blob = blob or hashlib.sha256(data).hexdigest()
    repo = tmp_path / "hub" / "models--org--model"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / f"{blob}.sparkctl-part").write_bytes(data)
    return str(repo), f"blobs/{blob}", blob


def test_a_ranged_file_is_checked_by_its_ranges_not_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 44: each range's sha256, computed by the sender while reading it and by the receiver
    while writing it, tiles the file: the part is renamed without being read again. A range that
    differs, or one missing, falls back to hashing the whole part (which then must match)."""
    from sparkctl.node import recv

    data = os.urandom(3000)
    repo, dest, blob = _part_of(tmp_path, data)
    sent = {str(o): [1000, hashlib.sha256(data[o : o + 1000]).hexdigest()] for o in (0, 1000, 2000)}
    got = {o: v[1] for o, v in sent.items()}
    reads: list[str] = []
    real = recv.HashCache.sha256
    monkeypatch.setattr(
        recv.HashCache, "sha256", lambda self, rel, path: reads.append(path) or real(self, rel, path)
    )
    cache = recv.HashCache(repo)
    assert recv._settle_ranged(repo, {dest: blob}, cache, {dest: sent}, {dest: got}) == []
    assert reads == [] and Path(repo, dest).read_bytes() == data and cache.data[dest][4] == blob

    repo, dest, blob = _part_of(tmp_path / "b", data)
    short = {k: v for k, v in got.items() if k != "2000"}
    assert recv._settle_ranged(repo, {dest: blob}, cache, {dest: sent}, {dest: short}) == []
    assert reads == [repo + "/" + dest + ".sparkctl-part"]  # not tiled: hashed whole, and it matches

    repo, dest, blob = _part_of(tmp_path / "c", data[:2000] + b"x" * 1000, hashlib.sha256(data).hexdigest())
    lied = dict(got, **{"2000": hashlib.sha256(b"y" * 1000).hexdigest()})
    assert recv._settle_ranged(repo, {dest: blob}, cache, {dest: sent}, {dest: lied}) == [dest]
    assert not Path(repo, dest).exists() and not Path(repo, dest + ".sparkctl-part").exists()


def test_ranges_through_a_pipeline_of_peers_are_checked_on_each(
    nodes: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sparkctl.ship.weights as w

    monkeypatch.setattr(w, "RANGE_MIN", 64 << 10)
    monkeypatch.setattr(w, "ALIGN", 4096)
    src, dst = nodes
    dirs = [dst, tmp_path / "p1-hf"]
    source = snapshot_manifest(LocalConnector("n1"), str(src), REF, lazy=True)
    out = ship_weights(
        source,
        LocalConnector("n1"),
        [WeightsPeer(LocalConnector(f"p{i}"), str(d), []) for i, d in enumerate(dirs)],
        ByteCounter(),
        transfers=Transfers(),
        streams=3,
    )
    assert {r.action for r in out.values()} == {"shipped"} and {r.streams for r in out.values()} == {3}, out
    a = snapshot_manifest(LocalConnector("n1"), str(src), REF)
    for d in dirs:
        b = snapshot_manifest(LocalConnector("x"), str(d), REF, deep=True)
        assert b.files == a.files and b.complete and not list(d.rglob("*.sparkctl-part"))
