"""`sparkctl persist install|status|remove` on the lab's nodes (over their SSH, no systemd
running): the dry run writes nothing, the env file is checked, install is idempotent, status
sees a changed unit, remove leaves nothing behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.testbed.lab import NODE_MOUNT
from tests.testbed.profiles import write_lab_profile
from tests.testbed_tests.conftest import SOLO, TP2, cli

pytestmark = pytest.mark.testbed


def left(lab, cluster: str) -> list[str]:
    """Every file or link of this cluster's units and guard files on the lab's nodes."""
    found = []
    for node in lab.nodes:
        for root in (
            Path(node.node_root, "systemd"),
            Path.home() / ".local" / "state" / "sparkctl" / "guard",
        ):
            found += [str(p) for p in root.rglob("*") if cluster in p.name] if root.exists() else []
    return found


def test_install_status_remove_on_lab_nodes(lab, setup, tmp_path):
    _, state = setup
    setup[0]()
    engine = {"api_key": {"env": "PERSIST_API_KEY"}}
    path = write_lab_profile(lab, tmp_path / "sparkctl.yaml", modes={"solo": SOLO, "tp2": TP2}, engine=engine)
    cluster = f"lab{lab.id}"
    unit_dir = f"{NODE_MOUNT}/systemd"
    env_host = Path(lab.node("spark1").node_root, "persist.env")
    env_host.write_text("PERSIST_API_KEY=not-a-real-key\n")
    os.chmod(env_host, 0o644)
    args = ("tp2", "--guard", "--unit-dir", unit_dir)
    env_file = ("--env-file", f"{NODE_MOUNT}/persist.env")

    no_env = cli(state, path, "persist", "install", *args)
    assert no_env.returncode == 2 and "--env-file" in no_env.stderr
    loose = cli(state, path, "persist", "install", *args, *env_file)
    assert loose.returncode == 2 and "readable by others" in loose.stderr and "chmod 600" in loose.stderr
    assert left(lab, cluster) == []
    os.chmod(env_host, 0o600)

    dry = cli(state, path, "persist", "install", *args, *env_file, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert (
        "supervise tp2 --wait -p" in dry.stdout and "Restart=always" in dry.stdout and "dry run" in dry.stdout
    )
    assert left(lab, cluster) == []

    first = cli(state, path, "persist", "install", *args, *env_file)
    assert first.returncode == 0, first.stderr
    assert (
        first.stdout.count(": written") == 10
    )  # supervisor + link; per node: guard program, config, unit, link
    sup = Path(lab.node("spark1").node_root, "systemd", f"sparkctl-supervise-{cluster}.service")
    assert f"EnvironmentFile={NODE_MOUNT}/persist.env" in sup.read_text()
    link = sup.parent / "multi-user.target.wants" / sup.name
    assert os.readlink(link) == f"{unit_dir}/{sup.name}"
    for node in ("spark1", "spark2"):
        assert Path(lab.node(node).node_root, "systemd", f"sparkctl-memguard-{cluster}.service").is_file()
    again = cli(state, path, "persist", "install", *args, *env_file)
    assert (
        again.returncode == 0 and ": written" not in again.stdout and again.stdout.count(": unchanged") == 10
    )

    st = cli(state, path, "persist", "status", *args, *env_file)
    assert st.returncode == 0, st.stdout + st.stderr
    assert st.stdout.count("current, enabled") == 3
    sup.write_text(sup.read_text().replace("RestartSec=10", "RestartSec=1"))
    stale = cli(state, path, "persist", "status", *args, *env_file)
    assert stale.returncode == 1 and "stale, enabled" in stale.stdout

    gone = cli(state, path, "persist", "remove", "tp2", "--unit-dir", unit_dir)
    assert gone.returncode == 0, gone.stderr
    assert ": removed" in gone.stdout
    assert left(lab, cluster) == []
    twice = cli(state, path, "persist", "remove", "tp2", "--unit-dir", unit_dir)
    assert twice.returncode == 0 and ": removed" not in twice.stdout
