"""profile/derived.py: a node's home and paths read from the profile alone."""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest

from sparkctl.profile import load_profile_file
from sparkctl.profile.derived import node_home, node_path

ROOT = Path(__file__).resolve().parents[3]


def test_the_local_nodes_home_is_the_profile_users_not_the_runners(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """dual-spark says `user: spark`: rank 0's `~` is spark's home whoever runs sparkctl (was
    $HOME: every multi-node `export k8s` exited 2 unless the runner's home was /home/spark)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    prof = load_profile_file(ROOT / "profiles" / "dual-spark.yaml")
    local, peer = prof.nodes
    assert local.is_local and local.user == "spark" != getpass.getuser()
    assert node_home(local, prof) == node_home(peer, prof) == "/home/spark"
    assert node_path("~/.cache/x", local, prof) == "/home/spark/.cache/x"


def test_a_local_node_without_a_user_is_the_runners_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    prof = load_profile_file(ROOT / "profiles" / "two-gpu-box.yaml")
    [box] = prof.nodes
    assert box.user is None and prof.ssh.user is None
    assert node_home(box, prof) == str(tmp_path)
