"""The units persist writes (lifecycle/persist/units.py, install.desired): their text, and
`systemd-analyze verify` (Debian's systemd package) on them for a two-node and a four-node
profile; a deliberately broken unit shows the check can fail."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sparkctl.lifecycle import guard
from sparkctl.lifecycle.persist.install import Target, desired
from sparkctl.lifecycle.persist.nodeops import Who
from sparkctl.lifecycle.persist.units import _exec, supervisor_unit
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file

ROOT = Path(__file__).resolve().parents[4]
needs_analyze = pytest.mark.skipif(
    not shutil.which("systemd-analyze"), reason="systemd-analyze not installed"
)


def units_for(profile_name: str, mode: str, env_file: str | None = None):
    prof = load_profile_file(ROOT / "profiles" / profile_name)
    plan = build_plan(prof, mode)
    nodes = list(dict.fromkeys(r.node for r in plan.ranks))
    whos = {n: Who("spark", 1000, f"/home/spark-{n}", True) for n in nodes}
    target = Target(
        mode, nodes[0], (sys.executable, "-m", "sparkctl"), "/home/spark/my profile.yaml", env_file
    )
    return prof, nodes, desired(prof, target, nodes, whos)


def verify(tmp_path: Path, files) -> subprocess.CompletedProcess:
    paths = []
    for f in files:
        if f.path.endswith(".service"):
            d = tmp_path / f.node
            d.mkdir(exist_ok=True)
            (d / f.name).write_text(f.text)
            paths.append(str(d / f.name))
    assert paths
    return subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *paths], capture_output=True, text=True, timeout=120
    )


@needs_analyze
@pytest.mark.parametrize(
    ("profile", "mode", "n_nodes"), [("dual-spark.yaml", "tp2", 2), ("quad-spark.yaml", "tp4", 4)]
)
def test_the_units_pass_systemd_analyze_verify(tmp_path, profile, mode, n_nodes):
    _, nodes, files = units_for(profile, mode, env_file="/home/spark/.config/sparkctl/env")
    assert len(nodes) == n_nodes
    units = [f for f in files if f.path.endswith(".service")]
    assert [f.node for f in units].count(nodes[0]) == 2  # the supervisor and rank 0's guard
    assert len(units) == 1 + n_nodes  # every node is unified memory: guarded
    res = verify(tmp_path, files)
    assert res.returncode == 0 and res.stderr.strip() == "", res.stderr


@needs_analyze
def test_verify_catches_a_broken_unit(tmp_path):
    _, _, files = units_for("dual-spark.yaml", "tp2")
    bad = files[0].__class__(
        files[0].node, files[0].path, files[0].text.replace("Restart=always", "Restart=sometimes")
    )
    res = verify(tmp_path, [bad])
    assert "restart specifier" in res.stderr


def test_the_supervisor_unit_runs_supervise_in_the_foreground_after_docker_and_the_network():
    _, nodes, files = units_for("dual-spark.yaml", "tp2", env_file="/home/spark/env file")
    text = files[0].text
    assert files[0].path == "/etc/systemd/system/sparkctl-supervise-sparkduo.service" and files[0].enable
    for line in (
        "After=network-online.target docker.service",
        "Wants=network-online.target docker.service",
        "Restart=always",
        "RestartSec=10",
        "StartLimitIntervalSec=600",
        "User=spark",
        "EnvironmentFile=/home/spark/env file",
        "WantedBy=multi-user.target",
    ):
        assert line in text.splitlines(), line
    assert (
        f'ExecStart={sys.executable} -m sparkctl supervise tp2 --wait -p "/home/spark/my profile.yaml"'
        in text
    )
    assert "--detach" not in text


def test_the_guard_files_are_private_and_under_the_node_users_home():
    prof, nodes, files = units_for("dual-spark.yaml", "tp2")
    data = [f for f in files if not f.path.endswith(".service")]
    assert {f.node for f in data} == set(nodes) and all(f.mode == 0o600 for f in data)
    assert all(f.path.startswith(f"/home/spark-{f.node}/.local/state/sparkctl/guard/") for f in data)
    # the very bytes `up` sends its guard (its lock and state shared: never two guards on a node), in a
    # file of its own name (`up`'s guard removes program files of older versions)
    assert {f.name for f in data} == {f"persist-memguard-{guard.digest()}.py", "persist-sparkduo.json"}
    assert next(f for f in data if f.name.endswith(".py")).text == guard.program()
    assert any('"cluster": "sparkduo"' in f.text for f in data)


def test_a_profile_that_guards_no_node_gets_only_the_supervisor():
    prof = load_profile_file(ROOT / "profiles" / "two-gpu-box.yaml")
    mode = prof.default_mode()
    nodes = list(dict.fromkeys(r.node for r in build_plan(prof, mode).ranks))
    whos = {n: Who("u", 1000, "/home/u", True) for n in nodes}
    files = desired(
        prof, Target(mode, nodes[0], ("/usr/bin/python3", "-m", "sparkctl"), "/p.yaml"), nodes, whos
    )
    assert [f.name for f in files] == [f"sparkctl-supervise-{prof.cluster}.service"]


def test_exec_words_escape_what_systemd_would_expand():
    assert _exec(["/a b/py", "50%", "$HOME", 'say "hi"']) == '"/a b/py" "50%%" "$$HOME" "say \\"hi\\""'
    assert "EnvironmentFile" not in supervisor_unit("c", "m", "u", ["/py"], "/p", None)


def test_the_guard_units_command_runs_the_guard_as_systemd_would(tmp_path):
    """ExecStart's words as systemd passes them (`$$` is a `$`): the guard starts, guards, and
    exits idle (no container of the cluster here) after idle_exit_s."""
    import json
    import shlex

    from sparkctl.lifecycle.persist.units import guard_config_text, guard_unit

    prof = load_profile_file(ROOT / "profiles" / "dual-spark.yaml")
    cfg = {**guard.node_config(prof), "cluster": "unittest-guard", "idle_exit_s": 1}
    program, config = tmp_path / f"memguard-{guard.digest()}.py", tmp_path / "persist-unittest-guard.json"
    program.write_text(guard.program())
    config.write_text(guard_config_text(cfg))
    text = guard_unit("unittest-guard", "root", sys.executable, str(program), str(config), guard.digest())
    line = next(x for x in text.splitlines() if x.startswith("ExecStart="))
    argv = shlex.split(line.removeprefix("ExecStart=").replace("$$", "$"))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}

    def start() -> subprocess.CompletedProcess:  # what systemd does at boot
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)

    res = start()
    assert res.returncode == 0, res.stderr
    # a program file changed on the node (not the bytes sparkctl wrote) never runs
    program.write_text(guard.program() + "print('rewritten')\n")
    res = start()
    assert res.returncode == 1 and "does not match its digest" in res.stderr, res.stderr
    program.write_text(guard.program())
    res = start()
    assert res.returncode == 0, res.stderr
    assert "guarding unittest-guard" in res.stdout and "exiting: no container of the cluster" in res.stdout
    assert json.loads((tmp_path / ".local/state/sparkctl/guard/unittest-guard.json").read_text())  # its state
