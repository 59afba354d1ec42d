"""What persist runs on a node (lifecycle/persist/nodeops.py), run here through the local
connector: atomic idempotent writes, links, removal, reading back, the env file's checks."""

from __future__ import annotations

import os
from pathlib import Path

from sparkctl.connectors.local import LocalConnector
from sparkctl.lifecycle.persist import nodeops
from sparkctl.lifecycle.persist.nodeops import Who


def me(tmp_path) -> Who:
    return Who("me", os.getuid(), str(tmp_path), False)


def test_write_is_atomic_idempotent_and_sets_the_mode(tmp_path):
    conn, w = LocalConnector("n"), me(tmp_path)
    path = str(tmp_path / "a" / "b.service")
    assert nodeops.write(conn, w, path, "one\n", 0o600) == "written"
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert nodeops.write(conn, w, path, "one\n", 0o600) == "unchanged"
    assert nodeops.write(conn, w, path, "two\n", 0o644) == "written"
    assert Path(path).read_text() == "two\n" and sorted(os.listdir(tmp_path / "a")) == ["b.service"]
    assert nodeops.read(conn, path) == ("present", "two\n")
    private = tmp_path / "p" / "q" / "s.json"
    assert nodeops.write(conn, w, str(private), "{}", 0o600) == "written"
    assert oct(os.stat(private.parent).st_mode & 0o777) == "0o700"  # a directory it made for it


def test_link_remove_and_prune_leave_nothing(tmp_path):
    conn, w = LocalConnector("n"), me(tmp_path)
    unit = str(tmp_path / "u.service")
    nodeops.write(conn, w, unit, "x", 0o644)
    link = str(tmp_path / "wants" / "u.service")
    assert nodeops.link(conn, w, unit, link) == "written"
    assert nodeops.link(conn, w, unit, link) == "unchanged"
    assert nodeops.read(conn, link) == ("link", unit)
    assert [nodeops.remove(conn, w, p) for p in (link, unit)] == ["removed", "removed"]
    assert nodeops.remove(conn, w, unit) == "absent"
    nodeops.prune(conn, w, [str(tmp_path / "wants")])
    assert os.listdir(tmp_path) == []
    assert nodeops.read(conn, unit) == ("missing", "")


def test_the_env_file_must_be_private_and_set_every_name(tmp_path):
    conn, w = LocalConnector("n"), me(tmp_path)
    env = tmp_path / "env"
    assert nodeops.env_file_problem(conn, w, str(env), ["HF_TOKEN"]) == f"{env} does not exist"
    env.write_text("export HF_TOKEN=abc\n")
    os.chmod(env, 0o644)
    assert "readable by others" in nodeops.env_file_problem(conn, w, str(env), ["HF_TOKEN"])
    os.chmod(env, 0o600)
    assert nodeops.env_file_problem(conn, w, str(env), ["HF_TOKEN"]) is None
    assert nodeops.env_file_problem(conn, w, str(env), ["HF_TOKEN", "API_KEY"]) == f"{env} sets no API_KEY"


def test_who_reads_the_node_user_and_its_home():
    got = nodeops.who(LocalConnector("n"))
    assert got.uid == os.getuid() and got.home == os.environ.get("HOME", got.home) and got.user
