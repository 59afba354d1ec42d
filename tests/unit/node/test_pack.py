"""The node keeps the compiled node program (like a __pycache__ entry): run for real, python3 subprocesses."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sparkctl.node import pack as manifest
from sparkctl.node.pack import node_argv, node_script_digest


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "home" / ".cache" / "sparkctl"


def _state(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, input=json.dumps({"models": []}), capture_output=True, text=True, timeout=60)


def _cached(home: Path) -> list[Path]:
    return sorted(home.glob("node-*"))


def test_first_op_compiles_and_keeps_the_code_private(home: Path) -> None:
    res = _state(node_argv("state"))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["models"] == {}
    (kept,) = _cached(home)
    assert kept.name == f"node-{node_script_digest()}.{sys.implementation.cache_tag}"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) == 0o700


def test_a_later_op_runs_the_kept_code_without_the_program(home: Path) -> None:
    assert _state(node_argv("state")).returncode == 0
    argv = node_argv("state")
    argv[argv.index(manifest.packed_node_script())] = "bm90IGEgcHJvZ3JhbQ=="  # not a program
    res = _state(argv)
    assert res.returncode == 0, res.stderr  # the compiled copy ran: the argument was never read


def test_a_damaged_copy_is_compiled_again(home: Path) -> None:
    assert _state(node_argv("state")).returncode == 0
    (kept,) = _cached(home)
    kept.write_bytes(b"\x00garbage")
    res = _state(node_argv("state"))
    assert res.returncode == 0, res.stderr
    assert kept.read_bytes() != b"\x00garbage"


def test_another_version_replaces_the_old_copy(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _state(node_argv("state")).returncode == 0
    (old,) = _cached(home)
    monkeypatch.setattr(manifest, "node_script_digest", lambda: "0" * 24)
    assert _state(manifest.node_argv("state")).returncode == 0
    assert [p.name for p in _cached(home)] == [f"node-{'0' * 24}.{sys.implementation.cache_tag}"]
    assert not old.exists()


def test_an_unwritable_cache_still_runs(home: Path) -> None:
    home.parent.mkdir(parents=True)
    home.write_text("a file where the directory would go")
    res = _state(node_argv("state"))
    assert res.returncode == 0, res.stderr


def test_a_symlinked_copy_is_not_followed(home: Path, tmp_path: Path) -> None:
    home.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"anything")
    name = f"node-{node_script_digest()}.{sys.implementation.cache_tag}"
    os.symlink(elsewhere, home / name)
    res = _state(node_argv("state"))
    assert res.returncode == 0, res.stderr
    assert not (home / name).is_symlink()  # replaced by a real file; the target untouched
    assert elsewhere.read_bytes() == b"anything"


def test_no_copy_inside_a_hugging_face_cache(home: Path) -> None:
    """hf_cache: ~/.cache puts ~/.cache/sparkctl inside what the serving container mounts read-write."""
    (home.parent / "hub").mkdir(parents=True)
    assert _state(node_argv("state")).returncode == 0
    assert not home.exists()


def test_a_copy_in_a_directory_others_can_write_is_not_run(home: Path) -> None:
    assert _state(node_argv("state")).returncode == 0
    home.chmod(0o777)
    argv = node_argv("state")
    argv[argv.index(manifest.packed_node_script())] = "bm90IGEgcHJvZ3JhbQ=="
    assert _state(argv).returncode != 0  # the copy was refused, so the (broken) program was compiled
    home.chmod(0o700)


@pytest.mark.parametrize(("uid", "mode"), [(12345, 0o600), (None, 0o666), (None, 0o644)])
def test_a_copy_not_the_users_own_0600_file_is_not_run(home: Path, uid: int | None, mode: int) -> None:
    """Checked on the opened descriptor: a copy owned by another uid, or readable/writable by others,
    in the user's own 0700 directory is not executed (the old check looked at the directory only)."""
    assert _state(node_argv("state")).returncode == 0
    (kept,) = _cached(home)
    if uid is not None and os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    if uid is not None:
        os.chown(kept, uid, -1)
    kept.chmod(mode)
    argv = node_argv("state")
    argv[argv.index(manifest.packed_node_script())] = "bm90IGEgcHJvZ3JhbQ=="
    assert _state(argv).returncode != 0  # the copy was refused, so the (broken) program was compiled


@pytest.mark.parametrize("marker", [".locks", "models--org--name", "datasets--org--set"])
def test_no_copy_inside_a_hub_cache_without_a_hub_dir(home: Path, marker: str) -> None:
    """hf_cache pointed at HF_HUB_CACHE itself (no `hub/` level): its repos or `.locks` give it away."""
    (home.parent / marker).mkdir(parents=True)
    assert _state(node_argv("state")).returncode == 0
    assert not home.exists()


def test_the_packer_lists_every_file_of_the_node_program_once() -> None:
    from pathlib import Path

    from sparkctl.node.pack import FILES

    here = Path(manifest.__file__).parent
    # flock.py goes into the memory guard's program (lifecycle/guard.py), not this one
    program = {p.name for p in here.glob("*.py")} - {"__init__.py", "pack.py", "flock.py"}
    assert sorted(FILES) == sorted(program) and len(FILES) == len(set(FILES))


def test_one_packer_for_both_programs() -> None:
    """node_script and the guard's program are the same packer over their files: sibling imports
    (marked `# node: strip`) dropped, one `from __future__` line first."""
    from sparkctl.lifecycle.guard import program
    from sparkctl.node.pack import pack

    guard = program()
    assert guard.startswith("from __future__ import annotations\n") and guard.count("from __future__") == 1
    assert not [line for line in guard.splitlines() if line.startswith("from .")]
    assert pack(Path(manifest.__file__).parent, manifest.FILES) == manifest.node_script()
