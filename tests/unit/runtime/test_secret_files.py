"""Where a rank's secret files are written on its node (runtime/secret_files.py: its placing script)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from sparkctl.runtime.secret_files import _SECRETS_SCRIPT, SECRETS_NOT_GIVEN

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare (a mount namespace)"
)
ROOT = Path(__file__).resolve().parents[3]
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


def test_seal_reads_a_ranks_secrets_once_into_its_tar_and_its_masks(monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkctl.errors import UsageError
    from sparkctl.planning.build import build_plan
    from sparkctl.profile.load import load_profile_file
    from sparkctl.runtime.secret_files import seal

    monkeypatch.setenv("HOME", "/home/spark")
    monkeypatch.setenv("HF_TOKEN", "hf_sealedvalue")
    monkeypatch.setenv("SPARKCTL_API_KEY", "sk-sealed")
    spec = build_plan(load_profile_file(ROOT / "profiles" / "dual-spark.yaml"), "tp2").rank(0)
    sealed = seal(spec, None)
    assert "hf_sealedvalue" in sealed.masks
    with tarfile.open(fileobj=io.BytesIO(sealed.tar or b"")) as tar:
        member = tar.getmember("HF_TOKEN")
        assert member.mode == 0o400 and tar.extractfile(member).read() == b"hf_sealedvalue"  # type: ignore[union-attr]
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(UsageError, match="HF_TOKEN"):
        seal(spec, None)
