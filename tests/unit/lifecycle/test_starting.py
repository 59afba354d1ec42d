"""lifecycle/starting.py: a start takes the secrets `up` sealed for each rank (read once per
`up`) and reads them again only for a rank that was not sealed (the router, a rolling step)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from sparkctl.lifecycle import starting
from sparkctl.planning.build import build_plan
from sparkctl.profile.load import load_profile_file
from sparkctl.runtime.secret_files import Sealed

ROOT = Path(__file__).resolve().parents[3]


def test_a_sealed_rank_is_started_with_its_tar_and_masks_unread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/spark")
    profile = load_profile_file(ROOT / "profiles" / "dual-spark.yaml")
    plan = build_plan(profile, "tp2")
    spec, other = plan.ranks[0], plan.ranks[1]
    got: dict[str, tuple] = {}
    sealed_here: list[str] = []

    def start_rank(conn, s, tar):  # noqa: ANN001, ANN202
        got[s.container_name] = (tar,)
        return SimpleNamespace(id="c1")

    monkeypatch.setattr(starting.containers, "start_rank", start_rank)
    monkeypatch.setattr(starting, "start_gateway", lambda *a: None)
    monkeypatch.setattr(
        starting.logs,
        "start_follower",
        lambda conn, name, path, masks, patterns: got.update({name: (*got[name], masks)}),
    )
    monkeypatch.setattr(starting.logs, "rank_log_path", lambda p, s: "/log")
    monkeypatch.setattr(
        starting, "seal", lambda s, conn: sealed_here.append(s.container_name) or Sealed(b"read-now", ("v2",))
    )
    pool = SimpleNamespace(get=lambda node: SimpleNamespace(node=node))
    started: list = []
    starting.start_specs(
        profile, pool, [spec, other], started, {spec.container_name: Sealed(b"tar", ("v1",))}
    )
    assert got[spec.container_name] == (b"tar", ["v1"])  # sealed by up: not read again
    assert got[other.container_name] == (b"read-now", ["v2"]) and sealed_here == [other.container_name]
    assert {s.container_name for s in started} == {spec.container_name, other.container_name}
