"""Manifest model and the pure diff that decides what a peer needs."""

from __future__ import annotations

import pytest

from sparkctl.facts.hfcache import repo_dir
from sparkctl.remote.manifest import FileEntry, Manifest, diff_files, manifest_digest

C = "c" * 40


def _m(files: dict[str, FileEntry], marker: str | None = None) -> Manifest:
    return Manifest("n1", "org/m", "main", "/hf/hub/models--org--m", C, files, [], marker)


def test_repo_dir_follows_the_hf_layout() -> None:
    assert repo_dir("/srv/hf", "Qwen/Qwen3-27B") == "/srv/hf/hub/models--Qwen--Qwen3-27B"


def test_digest_depends_on_content_not_order() -> None:
    assert manifest_digest({"a": "1", "b": "2"}) == manifest_digest({"b": "2", "a": "1"})
    assert manifest_digest({"a": "1", "b": "2"}) != manifest_digest({"a": "1", "b": "3"})
    assert manifest_digest({"a": "1"}) != manifest_digest({"b": "1"})


def test_complete_needs_a_marker_equal_to_the_digest() -> None:
    files = {"w.safetensors": FileEntry("a" * 64, 10, "a" * 64)}
    m = _m(files)
    assert m.present and not m.complete
    assert _m(files, marker=m.digest).complete
    assert not _m(files, marker="0" * 64).complete


def test_lazy_manifest_has_no_digest_until_hashed() -> None:
    m = _m({"w": FileEntry(None, 10, "b" * 64), "cfg.json": FileEntry(None, 3, None)})
    assert not m.hashed
    with pytest.raises(ValueError):
        _ = m.digest
    filled = m.with_hashes({"blobs/" + "b" * 64: "1" * 64, f"snapshots/{C}/cfg.json": "2" * 64})
    assert filled.hashed and filled.files["w"].sha256 == "1" * 64


def test_diff_sends_missing_and_different_files_once_per_blob() -> None:
    m = _m(
        {
            "a.safetensors": FileEntry("a" * 64, 100, "blob-a"),
            "same-as-a.safetensors": FileEntry("a" * 64, 100, "blob-a"),
            "b.safetensors": FileEntry("b" * 64, 200, "blob-b"),
            "c.json": FileEntry("c" * 64, 5, None),
            "d.bin": FileEntry(None, 7, "blob-d"),
        }
    )
    peer = {
        "blobs/blob-a": ["a" * 64, 100],  # identical
        "blobs/blob-b": ["f" * 64, 200],  # same size, other content: must be sent
        f"snapshots/{C}/c.json": None,  # missing
        "blobs/blob-d": ["9" * 64, 7],  # present, but the source has not hashed it yet
    }
    d = diff_files(m, peer)
    assert d.send == {"blobs/blob-b": 200, f"snapshots/{C}/c.json": 5}
    assert d.have == 2 and d.unknown == ["blobs/blob-d"] and d.bytes == 205
