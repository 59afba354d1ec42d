"""`init --ssh-setup` pieces that need no server: key pair creation and known_hosts records."""

from __future__ import annotations

from pathlib import Path

import paramiko

from sparkctl.discover.sshsetup import ensure_key_pair, known_key, record_host_key


def test_key_pair_is_created_once_with_private_mode(tmp_path: Path) -> None:
    path = tmp_path / "ssh" / "id_ed25519"
    line, created = ensure_key_pair(path, "sparkctl@test")
    assert created and path.stat().st_mode & 0o777 == 0o600
    key = paramiko.Ed25519Key.from_private_key_file(str(path))  # OpenSSH format paramiko and ssh read
    assert line == f"ssh-ed25519 {key.get_base64()} sparkctl@test"
    assert Path(f"{path}.pub").read_text().strip() == line
    again, created = ensure_key_pair(path, "other")
    assert not created and again == line  # an existing key is reused, never replaced


def test_recorded_host_key_is_found_for_that_port_only(tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    ensure_key_pair(tmp_path / "hostkey", "host")
    key = paramiko.Ed25519Key.from_private_key_file(str(tmp_path / "hostkey"))
    record_host_key(kh, "10.0.0.2", 2222, key)
    assert kh.read_text().startswith("[10.0.0.2]:2222 ssh-ed25519 ")
    assert known_key(kh, "10.0.0.2", 2222)["ssh-ed25519"] == key
    assert known_key(kh, "10.0.0.2", 22) == {}
