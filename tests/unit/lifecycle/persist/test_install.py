"""The persist flow (lifecycle/persist/install.py) end to end through local connectors, every
node's home and the unit directory in a temp dir: install, again (unchanged), status, remove."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from sparkctl.connectors.local import LocalConnector
from sparkctl.errors import UsageError
from sparkctl.lifecycle.persist import install, nodeops
from sparkctl.lifecycle.persist.nodeops import Who
from sparkctl.profile import load_profile_file

ROOT = Path(__file__).resolve().parents[4]
PROFILE = ROOT / "profiles" / "dual-spark.yaml"


class Pool:
    def get(self, node: str) -> LocalConnector:
        return LocalConnector(node)


@pytest.fixture
def setup(tmp_path, monkeypatch):
    monkeypatch.setattr(nodeops, "who", lambda conn: Who("me", os.getuid(), str(tmp_path / conn.node), False))
    prof = load_profile_file(PROFILE)
    env = tmp_path / "env"
    env.write_text("HF_TOKEN=x\nSPARKCTL_API_KEY=y\n")
    env.chmod(0o600)
    target = install.Target(
        "tp2",
        "spark1",
        (sys.executable, "-m", "sparkctl"),
        str(PROFILE),
        str(env),
        unit_dir=str(tmp_path / "units"),
    )
    return prof, target, tmp_path


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


def test_install_is_idempotent_and_remove_leaves_nothing(setup):
    prof, target, tmp = setup
    nodes = ["spark1"]  # the local nodes share one unit directory here: one guarded node
    first = install.install(prof, Pool(), target, nodes)
    assert [a[2] for a in first.actions].count("written") == 6  # 2 units + links, guard program + config
    assert "units/multi-user.target.wants/sparkctl-supervise-sparkduo.service" in files_under(tmp)
    again = install.install(prof, Pool(), target, nodes)
    assert {a[2] for a in again.actions} == {"unchanged"}
    states = [a[2] for a in install.status(prof, Pool(), target, nodes).actions]
    assert states.count("current, enabled") == 2 and states.count("current") == 2
    gone = install.remove(prof, Pool(), target, nodes)
    assert "removed" in {a[2] for a in gone.actions}
    assert files_under(tmp) == ["env"]
    assert (
        not any((tmp / "spark1" / ".local" / "state" / "sparkctl" / "guard").glob("*"))
        and not (tmp / "units" / "multi-user.target.wants").exists()
    )


def test_the_dry_run_writes_nothing(setup):
    prof, target, tmp = setup
    report = install.install(prof, Pool(), target, ["spark1", "spark2"], dry_run=True)
    assert len(report.files) == 7 and report.actions == [] and files_under(tmp) == ["env"]


def test_env_secrets_need_a_private_env_file_that_sets_them(setup):
    prof, target, tmp = setup
    with pytest.raises(UsageError, match="HF_TOKEN, SPARKCTL_API_KEY from the environment"):
        install.install(prof, Pool(), install.Target(**{**target.__dict__, "env_file": None}), ["spark1"])
    (tmp / "env").chmod(0o640)
    with pytest.raises(UsageError, match="readable by others") as exc:
        install.install(prof, Pool(), target, ["spark1"])
    assert exc.value.fix.startswith("chmod 600")
    assert files_under(tmp) == ["env"]


def test_the_controller_must_hold_sparkctl_and_the_profile(setup):
    prof, target, _ = setup
    bad = install.Target(**{**target.__dict__, "profile_path": "/nonexistent/sparkctl.yaml"})
    with pytest.raises(UsageError, match="the profile /nonexistent/sparkctl.yaml is not on spark1"):
        install.install(prof, Pool(), bad, ["spark1"])
