"""`sparkctl ship` on the real testbed: real sshd, real dockerd, real disks (tmpfs) per node."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from sparkctl.profile.schema import Profile
from tests.testbed.images import ENGINE_TAG, build_image_with_files, build_overlay_image
from tests.testbed.lab import Lab
from tests.testbed.profiles import lab_profile

pytestmark = pytest.mark.testbed

TARGET = "test-org/tiny-model"
DRAFT = "test-org/tiny-draft"


def make_fake_snapshot(
    hf_cache: Path, model_id: str, files: dict[str, int], revision: str = "main", seed: bytes | None = None
) -> str:
    """An HF cache snapshot with random file contents: LFS-style blobs named by sha256, snapshot
    symlinks, refs/<revision>. Returns the commit. Sizes in bytes."""
    repo = hf_cache / "hub" / ("models--" + model_id.replace("/", "--"))
    commit = hashlib.sha1(seed or os.urandom(16)).hexdigest()
    snap = repo / "snapshots" / commit
    for rel, size in files.items():
        h = hashlib.sha256()
        tmp = repo / "blobs" / f".tmp-{os.getpid()}"
        tmp.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh:
            left = size
            while left:
                block = os.urandom(min(left, 1 << 20))
                h.update(block)
                fh.write(block)
                left -= len(block)
        blob = repo / "blobs" / h.hexdigest()
        tmp.replace(blob)
        link = snap / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / revision).write_text(commit)
    return commit


def _profile(lab: Lab) -> Profile:
    return Profile.model_validate(lab_profile(lab))


def _hf(lab: Lab, node: str) -> Path:
    return Path(lab.node(node).node_root) / "hf"


def _profile_for(
    lab: Lab, *, image: str = ENGINE_TAG, target: str = TARGET, draft: str | None = DRAFT
) -> Profile:
    model = lab_profile(lab)["model"]
    model["target"] = {"id": target, "revision": "main"}
    model["draft"] = {"id": draft, "revision": "main"} if draft else None
    return Profile.model_validate(lab_profile(lab, image=image, model=model))


def _repo(lab: Lab, node: str, model_id: str) -> Path:
    return _hf(lab, node) / "hub" / ("models--" + model_id.replace("/", "--"))


def _ship(profile: Profile, **kw):
    from sparkctl.connectors.pool import NodePool
    from sparkctl.profile.derived import mode_nodes
    from sparkctl.ship import ByteCounter, ship

    counter = kw.pop("progress", None) or ByteCounter()
    with NodePool(profile) as pool:
        report = ship(profile, mode_nodes(profile, "tp2"), pool, progress=counter, **kw)
    return report, counter


def _manifests(lab: Lab, profile: Profile, ref):
    from sparkctl.connectors.pool import NodePool
    from sparkctl.profile.derived import hf_cache_for
    from sparkctl.ship import snapshot_manifest

    with NodePool(profile) as pool:
        return {
            n: snapshot_manifest(pool.get(n), hf_cache_for(profile, n), ref) for n in ("spark1", "spark2")
        }


def _intact_blobs(repo: Path) -> list[str]:
    """Names of blobs whose content matches their (sha256) name; raises on any that does not."""
    names = []
    for blob in (repo / "blobs").iterdir():
        if blob.name.endswith(".sparkctl-part"):
            continue
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name, f"{blob} looks complete but is not"
        names.append(blob.name)
    return names


def test_ship_image_and_weights_then_nothing(lab: Lab) -> None:
    tag = "sparkctl-test/ship-a:1"
    image_id = build_overlay_image(lab.docker("spark1"), ENGINE_TAG, tag, extra_kb=2048)
    target, draft = "ship-a/target", "ship-a/draft"
    make_fake_snapshot(
        _hf(lab, "spark1"), target, {"config.json": 700, "model.safetensors": 6 << 20, "t/tok.json": 9000}
    )
    make_fake_snapshot(_hf(lab, "spark1"), draft, {"config.json": 300, "model.safetensors": 2 << 20})
    profile = _profile_for(lab, image=tag, target=target, draft=draft)

    report, counter = _ship(profile)
    assert report.ok and report.source == "spark1" and report.targets == ["spark2"]
    assert lab.docker("spark2").images.get(tag).id == image_id
    img = next(r for r in report.results if r.to_json()["what"] == "image")
    assert img.action == "shipped" and img.layers_skipped == 1  # the engine base was already there
    assert 2 << 20 < img.bytes_sent < 3 << 20  # about the 2 MiB overlay, not the base
    for ref in (profile.model.target, profile.model.draft):
        m = _manifests(lab, profile, ref)
        assert m["spark1"].files == m["spark2"].files and m["spark1"].digest == m["spark2"].digest
        assert m["spark2"].complete and not m["spark1"].broken
    assert (_repo(lab, "spark2", target) / "refs" / "main").read_text() == (
        _repo(lab, "spark1", target) / "refs" / "main"
    ).read_text()
    assert sum(counter.sent.values()) >= 8 << 20

    again, counter2 = _ship(profile)
    assert again.ok and again.bytes_sent == 0 and sum(counter2.sent.values()) == 0
    assert {r.action for r in again.results} == {"skipped"}


def test_overlay_after_base_transfers_about_the_overlay(lab: Lab) -> None:
    base, top = "sparkctl-test/ship-base:1", "sparkctl-test/ship-top:1"
    build_overlay_image(lab.docker("spark1"), ENGINE_TAG, base, extra_kb=8192)
    top_id = build_overlay_image(lab.docker("spark1"), base, top, extra_kb=64)
    first, _ = _ship(_profile_for(lab, image=base), weights=False)
    assert first.ok and first.bytes_sent > 8 << 20
    report, _ = _ship(_profile_for(lab, image=top), weights=False)
    (img,) = report.results
    assert img.action == "shipped" and img.layers_skipped == 2 and img.layers_sent == 1
    assert img.bytes_sent < 256 << 10  # the 64 KiB layer plus metadata, not 8 MiB of base
    assert img.bytes_skipped > 8 << 20
    assert lab.docker("spark2").images.get(top).id == top_id


def test_the_image_crosses_the_link_compressed_and_loads_to_the_same_id(lab: Lab) -> None:
    """Issue 44: every lab node has zstd, so the stream goes through `zstd -1`: whole (ssh reads
    zstd's output; a peer with none of its layers), filtered (the peer has the bottom layer, zstd
    between the filter and the link) and plain with `compress=False`; each loads to the source's ID."""
    zeros = b"\0" * (4 << 20)  # compressible: what crosses the link is a small part of what loads
    client = lab.docker("spark1")
    base = "sparkctl-test/ship-zstd-base:1"
    base_id = build_image_with_files(client, "scratch", base, {"/zeros": zeros})
    whole, _ = _ship(_profile_for(lab, image=base), weights=False)
    (img,) = whole.results
    assert img.action == "shipped" and img.layers_skipped == 0 and img.codec == "zstd"
    assert img.bytes_sent >= 4 << 20 and img.wire_bytes is not None and img.wire_bytes < 1 << 20
    assert lab.docker("spark2").images.get(base).id == base_id

    top = "sparkctl-test/ship-zstd-top:1"
    top_id = build_image_with_files(client, base, top, {"/more-zeros": zeros})
    filtered, _ = _ship(_profile_for(lab, image=top), weights=False)
    (img,) = filtered.results
    assert img.layers_skipped == 1 and img.codec == "zstd" and img.wire_bytes < img.bytes_sent // 4
    assert lab.docker("spark2").images.get(top).id == top_id

    lab.docker("spark2").images.remove(top, force=True)
    plain, _ = _ship(_profile_for(lab, image=top), weights=False, compress=False)
    (img,) = plain.results
    assert img.action == "shipped" and img.codec is None and img.wire_bytes is None
    assert img.bytes_sent >= 4 << 20
    assert lab.docker("spark2").images.get(top).id == top_id


class _CutAfter:
    """Progress sink that cuts the peer's SSH (sshd and live sessions) once `limit` bytes moved."""

    def __init__(self, lab: Lab, node: str, limit: int) -> None:
        from sparkctl.ship import ByteCounter

        self.lab, self.node, self.limit, self.cut = lab, node, limit, False
        self.counter = ByteCounter()
        self._lock = threading.Lock()

    def start(self, key: str, description: str, total: int | None) -> None:
        self.counter.start(key, description, total)

    def advance(self, key: str, n: int) -> None:
        self.counter.advance(key, n)
        with self._lock:
            if not self.cut and sum(self.counter.sent.values()) >= self.limit:
                self.cut = True
                self.lab.stop_sshd(self.node, kill_sessions=True)

    def finish(self, key: str, note: str) -> None:
        self.counter.finish(key, note)


def test_connection_lost_midway_leaves_nothing_complete_and_rerun_resumes(lab: Lab) -> None:
    from sparkctl.ship import ShipError

    target = "ship-cut/target"
    files = {f"model-{i:05d}.safetensors": 4 << 20 for i in range(6)} | {"config.json": 500}
    make_fake_snapshot(_hf(lab, "spark1"), target, files)
    profile = _profile_for(lab, target=target, draft=None)
    cutter = _CutAfter(lab, "spark2", limit=10 << 20)
    lab.set_egress_rate("spark1", 200)  # ~25 MB/s: the cut lands mid-transfer on any machine
    try:
        with pytest.raises(ShipError) as err:
            _ship(profile, image=False, progress=cutter)
        assert err.value.node == "spark2" and "rerun" in (err.value.fix or "")
    finally:
        lab.set_egress_rate("spark1", None)
        lab.start_sshd("spark2")
    assert cutter.cut
    repo = _repo(lab, "spark2", target)
    kept = _intact_blobs(repo)  # every file under its final name is whole
    assert 0 < len(kept) < len(files)
    assert not (repo / "refs" / "main").exists()
    assert not list((repo / ".sparkctl").glob("*.complete"))
    assert not _manifests(lab, profile, profile.model.target)["spark2"].complete

    report, _ = _ship(profile, image=False)
    (res,) = report.results
    assert res.action == "shipped" and res.files_kept >= len(kept) - 1
    assert res.files_sent <= len(files) - len(kept) + 1
    m = _manifests(lab, profile, profile.model.target)
    assert m["spark2"].complete and m["spark2"].digest == m["spark1"].digest
    assert not list(repo.rglob("*.sparkctl-part"))


def test_disk_full_is_a_clear_error_and_leaves_no_partial_files(lab: Lab) -> None:
    from sparkctl.ship import DiskFullError

    target = "ship-full/target"
    make_fake_snapshot(_hf(lab, "spark1"), target, {"a.safetensors": 24 << 20, "b.safetensors": 24 << 20})
    profile = _profile_for(lab, target=target, draft=None)
    repo = _repo(lab, "spark2", target)
    try:
        lab.fill_disk("spark2", leave_mb=30)
        with pytest.raises(DiskFullError) as before:  # checked before anything moves
            _ship(profile, image=False)
        assert before.value.node == "spark2" and "free" in before.value.message
        assert not (repo / "blobs").exists() or not list((repo / "blobs").iterdir())

        with pytest.raises(DiskFullError) as during:  # the real ENOSPC mid-file
            _ship(profile, image=False, check_space=False)
        assert "partial file was removed" in during.value.message
        assert not list(repo.rglob("*.sparkctl-part"))
        assert len(_intact_blobs(repo)) <= 1
        assert not list((repo / ".sparkctl").glob("*.complete"))
    finally:
        lab.free_disk("spark2")
    report, _ = _ship(profile, image=False)
    assert report.ok and _manifests(lab, profile, profile.model.target)["spark2"].complete


def test_source_lacking_image_or_weights_is_a_clear_error(lab: Lab, tmp_path: Path) -> None:
    import subprocess
    import sys

    import yaml

    from sparkctl.ship import SourceMissingError

    with pytest.raises(SourceMissingError, match="is on no node") as err:
        _ship(_profile_for(lab, image="sparkctl-test/nope:1"), weights=False)
    assert "spark1" in err.value.message and "spark2" in err.value.message  # where it looked
    with pytest.raises(SourceMissingError, match="complete on no node") as err:
        _ship(_profile_for(lab, target="nobody/absent", draft=None), image=False)
    assert "spark1:/srv/sparknode/hf/hub/models--nobody--absent" in err.value.message
    assert "spark2:/srv/sparknode/hf/hub/models--nobody--absent" in err.value.message

    doc = lab_profile(lab, image="sparkctl-test/nope:1")
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    proc = subprocess.run(
        [sys.executable, "-m", "sparkctl", "ship", "tp2", "--image", "-p", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr
    assert "is on no node" in proc.stderr and "Traceback" not in proc.stderr


def test_cli_ship_json(lab: Lab, tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    import yaml

    target = "ship-cli/target"
    make_fake_snapshot(_hf(lab, "spark1"), target, {"config.json": 100, "w.safetensors": 1 << 20})
    doc = lab_profile(lab)
    doc["model"]["target"] = {"id": target, "revision": "main"}
    doc["model"]["draft"] = None
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    argv = [sys.executable, "-m", "sparkctl", "ship", "tp2", "-p", str(path), "--json"]
    dry = subprocess.run([*argv, "--dry-run"], capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, dry.stderr
    (would,) = [r for r in json.loads(dry.stdout)["results"] if r["what"] == f"weights:{target}"]
    assert (
        would["action"] == "would ship"
        and would["files_sent"] == 2
        and would["bytes_sent"] == 100 + (1 << 20)
    )
    assert not _repo(lab, "spark2", target).exists()  # the dry run sent nothing
    human = subprocess.run(argv[:-1] + ["--dry-run"], capture_output=True, text=True, timeout=300)
    assert human.returncode == 0 and f"{target}: would send 2 file(s), 1.0 MiB" in human.stdout, human.stdout
    first = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    out = json.loads(first.stdout)
    assert out["ok"] and out["targets"] == ["spark2"]
    assert {r["what"]: r["action"] for r in out["results"]} == {
        "image": "skipped",
        f"weights:{target}": "shipped",
    }
    second = json.loads(subprocess.run(argv, capture_output=True, text=True, timeout=300).stdout)
    assert second["bytes_sent"] == 0


def test_a_pinned_commit_ships_so_the_peer_resolves_the_id_offline_like_the_source(lab: Lab) -> None:
    """Issue 46: the profile pins the commit; after `ship` the peer's cache opens `<id>` (refs/main)
    offline with huggingface_hub's own resolver, to the same snapshot as the source's."""
    from huggingface_hub import snapshot_download

    target = "ship-pin/target"
    commit = make_fake_snapshot(
        _hf(lab, "spark1"), target, {"config.json": 200, "model.safetensors": 1 << 20}
    )
    model = lab_profile(lab)["model"] | {"target": {"id": target, "revision": commit}, "draft": None}
    profile = Profile.model_validate(lab_profile(lab, model=model))

    report, _ = _ship(profile)
    assert report.ok, report
    found = {
        node: snapshot_download(target, cache_dir=_hf(lab, node) / "hub", local_files_only=True)
        for node in ("spark1", "spark2")
    }
    assert Path(found["spark2"]).relative_to(_hf(lab, "spark2")) == Path(found["spark1"]).relative_to(
        _hf(lab, "spark1")
    )
    assert Path(found["spark2"]).name == commit and (Path(found["spark2"]) / "config.json").is_file()
