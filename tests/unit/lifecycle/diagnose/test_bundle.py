"""The bundle (lifecycle/diagnose/bundle.py): manifest, masked members, atomic write."""

from __future__ import annotations

import json
import tarfile

import pytest

from sparkctl.lifecycle.diagnose.bundle import MANIFEST, Bundle
from sparkctl.lifecycle.diagnose.mask import Masker


def read(path) -> dict[str, str]:
    with tarfile.open(path) as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode() for m in tar.getmembers()}


def test_manifest_lists_members_failures_and_unreachable_nodes(tmp_path):
    b = Bundle("root", Masker(["s3cr3t-value"]))
    b.add("nodes/a/kernel.txt", "Linux a 6.8 s3cr3t-value", "uname -a", rc=0)
    b.failed("logs/rank1.log", "rank 1's log", "b unreachable: s3cr3t-value")
    b.nodes = {"a": {"reachable": True}, "b": {"reachable": False, "error": "refused"}}
    out = b.write(tmp_path / "x.tar.gz", cluster="c1")
    members = read(out)
    manifest = json.loads(members[MANIFEST])
    assert manifest["cluster"] == "c1" and manifest["unreachable"] == ["b"]
    assert manifest["members"]["nodes/a/kernel.txt"] == {"what": "uname -a", "rc": 0}
    assert manifest["members"]["logs/rank1.log"]["error"] == "b unreachable: ***"
    assert set(members) == {MANIFEST, "nodes/a/kernel.txt"}
    assert members["nodes/a/kernel.txt"] == "Linux a 6.8 ***"
    assert oct(out.stat().st_mode & 0o777) == "0o600"


def test_a_failed_write_leaves_no_file(tmp_path, monkeypatch):
    b = Bundle("root", Masker([]))
    b.add("a.txt", "x", "x")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(tarfile.TarFile, "addfile", boom)
    with pytest.raises(OSError):
        b.write(tmp_path / "x.tar.gz")
    assert list(tmp_path.iterdir()) == []
