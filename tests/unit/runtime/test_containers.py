"""Where a rank's secret files are written on its node (runtime/containers.py's placing script)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from sparkctl.runtime.containers import _SECRETS_SCRIPT, SECRETS_NOT_GIVEN

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare (a mount namespace)"
)
VALUE = b"sk-canary-secret-0123"


def _tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("API_KEY")
        info.size, info.mode = len(VALUE), 0o400
        tar.addfile(info, io.BytesIO(VALUE))
    return buf.getvalue()


def _place(mount: list[str], shm: Path) -> subprocess.CompletedProcess:
    """The placing script in a private mount namespace whose /dev/shm is `mount`ed from `shm`."""
    inner = 'mount "$@" /dev/shm && ls -la /dev/shm >/dev/null && exec sh -c "$SCRIPT" sparkctl-secrets c1'
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", inner, "x", *mount],
        input=_tar(),
        capture_output=True,
        env={**os.environ, "SCRIPT": _SECRETS_SCRIPT},
        timeout=60,
    )


def _holds_value(root: Path) -> bool:
    return any(p.is_file() and VALUE in p.read_bytes() for p in root.rglob("*"))


def test_secrets_are_refused_when_dev_shm_is_on_a_disk(tmp_path: Path) -> None:
    disk = tmp_path / "shm"
    disk.mkdir()
    res = _place(["--bind", str(disk)], disk)
    assert res.returncode == 3 and b"/dev/shm is not a tmpfs" in res.stderr
    assert not _holds_value(disk)  # not one byte of it on the disk


def test_secrets_land_on_a_tmpfs_dev_shm(tmp_path: Path) -> None:
    res = _place(["-t", "tmpfs", "tmpfs"], tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.decode().startswith(f"/dev/shm/sparkctl-{os.geteuid()}/c1")


def _place_as(owner: str, as_nobody: bool = False) -> subprocess.CompletedProcess:
    """The placing script on a private tmpfs /dev/shm, handing the files to `owner`; prints the
    files' uid:gid (or the script's failure). `as_nobody`: run by an unprivileged node user."""
    run = (
        'setpriv --reuid 65534 --regid 65534 --clear-groups sh -c "$SCRIPT"'
        if as_nobody
        else 'sh -c "$SCRIPT"'
    )
    inner = (
        "mount -t tmpfs -o mode=1777 tmpfs /dev/shm && "
        f'r=$({run} sparkctl-secrets c1 "$OWNER") && stat -c %u:%g "$r"/API_KEY; '
        'rc=$?; ls -A /dev/shm/sparkctl-*/ 2>/dev/null | sed "s/^/left:/"; exit $rc'
    )
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", inner],
        input=_tar(),
        capture_output=True,
        env={**os.environ, "SCRIPT": _SECRETS_SCRIPT, "OWNER": owner},
        timeout=60,
    )


def test_secret_files_are_handed_to_the_engines_uid() -> None:
    """engine.container.user UID:GID other than the node user's: the engine reads its key file."""
    res = _place_as("1000:1000")
    assert res.returncode == 0, res.stderr
    assert res.stdout.decode().splitlines()[0] == "1000:1000"
    assert _place_as("").stdout.decode().splitlines()[0] == f"{os.geteuid()}:{os.getegid()}"


@pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv (util-linux)")
def test_an_unprivileged_node_user_cannot_hand_them_away_and_leaves_nothing() -> None:
    res = _place_as("1000:1000", as_nobody=True)
    assert res.returncode == SECRETS_NOT_GIVEN, (res.returncode, res.stderr)
    assert b"left:" not in res.stdout  # the container's directory is removed with its files


def test_launch_params_run_exactly_the_argv_whatever_the_image() -> None:
    from sparkctl.runtime.containers import launch_params

    got = launch_params(["vllm", "serve", "org/m", "--port", "8000"])
    assert got == {"entrypoint": ["vllm"], "command": ["serve", "org/m", "--port", "8000"]}
    assert launch_params(["python3"]) == {"entrypoint": ["python3"], "command": []}
