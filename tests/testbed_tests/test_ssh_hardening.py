"""SSH arguments on a real sshd: whatever the login shell (bash, dash, fish, tcsh), an argument is
never parsed by a shell, on the controller's path and on ship's node-to-node hop; a `user` that
looks like an option runs nothing."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.testbed.profiles import DRAFT_ID, SEED_COMMIT, TARGET_ID
from tests.testbed_tests.conftest import cli
from tests.testbed_tests.test_connectors import connector

pytestmark = pytest.mark.testbed


def _evil(marker: Path) -> list[str]:
    """Payloads for POSIX shells, fish (`(cmd)`, `;`), csh-likes and option parsers."""
    return [
        f"$(touch {marker})",
        f"`touch {marker}`",
        f"(touch {marker})",
        f"main; touch {marker}",
        f"main\ntouch {marker}",
        f"'; touch {marker}; '",
        f"\\'';touch {marker};#",
        f'"; touch {marker}; "',
        "\\",
        "-n",
        "",
        "{a,b}",
        "~",
        "a b",
        "%self",
        "!!",
        "ünï",
    ]


@pytest.fixture
def open_dir():
    """A world-writable home/marker directory: the throwaway user could create the marker there."""
    where = Path(tempfile.mkdtemp(prefix="sparkctl-ssh-", dir="/tmp"))
    where.chmod(0o777)
    yield where
    shutil.rmtree(where, ignore_errors=True)


@contextlib.contextmanager
def login_user(shell: str, lab_id: int, home: Path):
    """A throwaway user whose login shell is `shell` (the lab's sshd takes the lab key for any user)."""
    path = shutil.which(shell)
    if path is None:
        pytest.fail(f"{shell} is not installed (scripts/install-deps installs it)")
    name = f"sparkctl{shell}{lab_id}"[:31]
    # "*": no password, but not "locked" (sshd without PAM refuses locked accounts).
    subprocess.run(["useradd", "-M", "-d", str(home), "-p", "*", "-s", path, name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["userdel", "-f", name], check=False)  # -f: sshd may still hold the session


@pytest.mark.parametrize("shell", ["bash", "dash", "fish", "tcsh"])
def test_arguments_survive_any_login_shell(lab, open_dir, shell):
    marker = open_dir / f"pwned-{shell}"
    evil = _evil(marker)
    with login_user(shell, lab.id, open_dir) as user, connector(lab, user=user) as conn:
        login = conn.run(["sh", "-c", 'getent passwd "$(id -un)" | cut -d: -f7'])
        assert login.stdout.strip() == shutil.which(shell) and not login.stderr
        res = conn.run(["printf", "%s|", *evil])
        assert res.ok, res.stderr
        assert res.stdout == "".join(f"{a}|" for a in evil)
        res = conn.run(["sh", "-c", 'cat; printf "%s" "$1"', "sparkctl", evil[0]], input=b"stdin ok\n")
        assert res.stdout == f"stdin ok\n{evil[0]}"
    assert not marker.exists()


def test_crafted_revision_is_a_profile_error_and_runs_nothing(lab, setup, open_dir, tmp_path):
    """The first report's case (fish login shell, crafted `revision`): the revision never reaches a
    node now, it is not a revision name (the transport itself is proven by the tests around)."""
    write_profile, state = setup
    marker = open_dir / "pwned-revision"
    doc = yaml.safe_load(write_profile().read_text())
    doc["model"]["target"]["revision"] = f"main\\'';touch {marker};#"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    res = cli(state, path, "ship", "tp2", "--weights")
    assert res.returncode == 2 and "model.target.revision" in res.stderr, res.stderr
    assert not marker.exists()


@pytest.mark.parametrize("shell", ["fish", "tcsh"])
def test_ship_hop_to_a_peer_whose_login_shell_is_fish_or_tcsh(lab, setup, open_dir, tmp_path, shell):
    """ship's source node (spark1, root) reaches the peer (spark2) as a user whose login shell is
    fish or tcsh, into an HF cache whose name is the issue's payload: the weights arrive, nothing
    runs (under fish the old POSIX quoting ran the command; under tcsh the hop did not parse)."""
    write_profile, state = setup
    marker = open_dir / f"pwned-hop-{shell}"
    cache = open_dir / f"hf \\'\"; touch {marker}; #"
    doc = yaml.safe_load(write_profile().read_text())
    with login_user(shell, lab.id, open_dir) as user:
        doc["nodes"][1]["user"] = user
        doc["nodes"][1]["hf_cache"] = str(cache)
        path = tmp_path / "hop.yaml"
        path.write_text(yaml.safe_dump(doc))
        res = cli(state, path, "ship", "tp2", "--weights")
        assert res.returncode == 0, res.stdout + res.stderr
        for model_id in (TARGET_ID, DRAFT_ID):
            repo = cache / "hub" / ("models--" + model_id.replace("/", "--"))
            shard = repo / "snapshots" / SEED_COMMIT / "model.safetensors"
            assert shard.read_bytes() == model_id.encode() * 1024
            assert (repo / "refs" / "main").read_text() == SEED_COMMIT
    assert not marker.exists()


def test_user_that_looks_like_an_option_runs_nothing(lab, setup, tmp_path):
    write_profile, state = setup
    marker = tmp_path / "pwned-user"
    doc = yaml.safe_load(write_profile().read_text())  # the fixture's cleanup reads that valid one
    doc["nodes"][1]["user"] = f"-oProxyCommand=touch {marker}"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    res = cli(state, path, "preflight", "tp2")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "nodes[1].user" in res.stderr and "must not start with '-'" in res.stderr
    assert not marker.exists()
