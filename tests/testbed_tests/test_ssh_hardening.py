"""SSH arguments on a real sshd: whatever the login shell (bash, dash, fish), an argument is
never parsed by a shell; a `user` that looks like an option runs nothing."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

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


@pytest.mark.parametrize("shell", ["bash", "dash", "fish"])
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


def test_crafted_revision_with_fish_login_shell_runs_nothing(lab, setup, open_dir):
    """The issue's case: fish as a node's login shell and a crafted `revision` (preflight and ship send it)."""
    write_profile, state = setup
    marker = open_dir / "pwned-revision"
    path = write_profile()
    with login_user("fish", lab.id, open_dir) as user:
        doc = yaml.safe_load(path.read_text())
        for node in doc["nodes"]:
            node["user"] = user
        # POSIX single quotes (shlex.quote) are not fish's: there \\' escapes the quote.
        doc["model"]["target"]["revision"] = f"main\\'';touch {marker};#"
        path.write_text(yaml.safe_dump(doc))
        res = cli(state, path, "preflight", "tp2", "--only", "SshReachable,Weights", "--json")
        assert '"SshReachable"' in res.stdout and res.returncode in (0, 1), res.stderr
        res = cli(state, path, "ship", "tp2", "--weights")  # sends the revision to both nodes' python3
        assert "Traceback" not in res.stderr, res.stderr
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
