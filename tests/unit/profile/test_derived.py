"""profile/derived.py: a node's home and paths read from the profile alone."""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest

from sparkctl.errors import UsageError
from sparkctl.profile import load_profile_file
from sparkctl.profile.derived import image_ref, mode_nodes, node_home, node_path

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


def test_a_modes_nodes_are_the_plans_without_building_it() -> None:
    """`ship` takes a mode's nodes from here (no planner on a re-ship): the default mode when none
    is named, rank order, and the same nodes the plan's ranks run on."""
    from sparkctl.planning.build import build_plan

    prof = load_profile_file(ROOT / "profiles" / "dual-spark.yaml")
    assert mode_nodes(prof) == ["spark1"]
    for mode in prof.modes:
        assert mode_nodes(prof, mode) == list(dict.fromkeys(build_plan(prof, mode).nodes))
        assert {r.image for r in build_plan(prof, mode).ranks} == {image_ref(prof)[0]}


def test_an_unknown_mode_is_refused_with_the_near_name_and_the_list() -> None:
    prof = load_profile_file(ROOT / "profiles" / "dual-spark.yaml")
    with pytest.raises(UsageError, match="unknown mode 'tp3'") as err:
        mode_nodes(prof, "tp3")
    assert err.value.fix == "did you mean 'tp2'? modes in this profile: solo, tp2, dp2"


def test_a_two_gpu_box_is_one_node_to_ship_to_whatever_its_ranks() -> None:
    prof = load_profile_file(ROOT / "profiles" / "two-gpu-box.yaml")
    assert mode_nodes(prof, "tp2") == ["box"]
