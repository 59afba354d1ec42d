"""WeightsOffline on a real on-disk HF cache: the probe run for real (python3 via LocalConnector),
its verdict cross-checked with huggingface_hub's own offline open where that is installed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sparkctl.connectors.local import LocalConnector
from sparkctl.facts.hfcache import repo_dir
from sparkctl.findings import Severity
from sparkctl.preflight.checks.weights_offline import OfflineOpen, check_offline, open_probe
from sparkctl.preflight.registry import FAST_CHECKS, REGISTRY
from sparkctl.profile.schema import ModelRef
from sparkctl.ship import ByteCounter, snapshot_manifest
from sparkctl.ship.hop import Transfers
from sparkctl.ship.weights import WeightsPeer, ship_weights
from tests.testbed_tests.test_ship import make_fake_snapshot

MODEL = "org/model"
FILES = {"config.json": 200, "model.safetensors": 4000, "sub/tokenizer.json": 100}


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the node program's hash cache


def _open(hf: Path, rev: str) -> tuple[OfflineOpen, list]:
    got = open_probe(repo_dir(str(hf), MODEL), rev).run(LocalConnector("n2"))
    return got, check_offline("target", MODEL, rev, "n2", got, repo_dir(str(hf), MODEL))


def _hub_opens(hf: Path, rev: str) -> bool | None:
    """huggingface_hub's offline open of the snapshot and its config.json (None: not installed)."""
    try:
        from huggingface_hub import snapshot_download, try_to_load_from_cache
    except ImportError:
        return None
    try:
        snapshot_download(MODEL, revision=rev, cache_dir=str(hf / "hub"), local_files_only=True)
    except Exception:
        return False
    return isinstance(
        try_to_load_from_cache(MODEL, "config.json", cache_dir=str(hf / "hub"), revision=rev), str
    )


def _verdict(findings: list) -> list[Severity]:
    return [f.severity for f in findings]


def test_a_branch_and_a_pinned_commit_open_offline(tmp_path: Path) -> None:
    hf = tmp_path / "hf"
    commit = make_fake_snapshot(hf, MODEL, FILES)
    for rev in ("main", commit):
        got, found = _open(hf, rev)
        assert _verdict(found) == [Severity.OK] and got.commit == commit and got.files == 3
        assert _hub_opens(hf, rev) in (True, None)
    assert "refs/main ->" in _open(hf, "main")[1][0].message
    assert _open(hf, "v2")[1] == [] and _open(tmp_path / "none", "main")[1] == []  # Weights says those


def test_a_ref_with_a_newline_fails_as_it_does_for_the_engine(tmp_path: Path) -> None:
    hf = tmp_path / "hf"
    commit = make_fake_snapshot(hf, MODEL, FILES)
    (Path(repo_dir(str(hf), MODEL)) / "refs" / "main").write_text(commit + "\n")
    _got, found = _open(hf, "main")
    assert _verdict(found) == [Severity.ERROR] and found[0].node == "n2"
    assert "whitespace" in found[0].message and f"printf %s {commit}" in found[0].fix
    assert _hub_opens(hf, "main") in (False, None)


def test_a_missing_blob_a_no_exist_mark_and_no_config_fail(tmp_path: Path) -> None:
    hf = tmp_path / "hf"
    commit = make_fake_snapshot(hf, MODEL, FILES)
    repo = Path(repo_dir(str(hf), MODEL))
    snap = repo / "snapshots" / commit
    (snap / "model.safetensors").resolve().unlink()
    _got, found = _open(hf, commit)
    assert _verdict(found) == [Severity.ERROR] and "model.safetensors" in found[0].message
    assert "sparkctl ship --weights --to n2" in found[0].fix
    commit = make_fake_snapshot(hf, MODEL, FILES)
    (repo / ".no_exist" / commit).mkdir(parents=True)
    (repo / ".no_exist" / commit / "config.json").write_text("")
    _got, found = _open(hf, "main")
    assert _verdict(found) == [Severity.ERROR] and ".no_exist" in found[0].fix
    assert _hub_opens(hf, "main") in (False, None)
    (repo / ".no_exist" / commit / "config.json").unlink()
    (repo / "snapshots" / commit / "config.json").unlink()
    _got, found = _open(hf, "main")
    assert _verdict(found) == [Severity.ERROR] and "no config.json" in found[0].message


def test_a_shipped_peer_opens_offline_by_branch_and_by_commit(tmp_path: Path) -> None:
    """Issue 46: the profile pins the commit; after ship the peer also resolves `<id>` (refs/main)."""
    src, dst = tmp_path / "n1-hf", tmp_path / "n2-hf"
    commit = make_fake_snapshot(src, MODEL, FILES)
    dst.mkdir()
    ref = ModelRef(id=MODEL, revision=commit)
    conn1, conn2 = LocalConnector("n1"), LocalConnector("n2")
    source = snapshot_manifest(conn1, str(src), ref, lazy=True)
    out = ship_weights(
        source, conn1, [WeightsPeer(conn2, str(dst), [])], ByteCounter(), transfers=Transfers()
    )
    assert out["n2"].action == "shipped"
    assert (Path(repo_dir(str(dst), MODEL)) / "refs" / "main").read_bytes() == commit.encode()
    for rev in ("main", commit):
        assert _verdict(_open(dst, rev)[1]) == [Severity.OK]
        assert _hub_opens(dst, rev) in (True, None)
    assert not list(Path(repo_dir(str(dst), MODEL)).rglob("*.sparkctl-part"))
    assert os.stat(Path(repo_dir(str(dst), MODEL)) / "refs" / "main").st_mode & 0o444 == 0o444


def test_it_is_registered_in_ups_fast_subset() -> None:
    assert "WeightsOffline" in REGISTRY and "WeightsOffline" in FAST_CHECKS
