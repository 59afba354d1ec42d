"""The controller's ship hints: the image ID a source had for a ref, by cluster, node and ref."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.ship.hints import hints_path, image_hint, remember_image

A, B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_a_hint_is_kept_per_cluster_node_and_ref_and_replaced_when_the_image_changes() -> None:
    assert image_hint("duo", ["spark1"], "img:1") is None
    remember_image("duo", "spark1", "img:1", A)
    assert image_hint("duo", ["spark1"], "img:1") == A
    assert image_hint("duo", ["spark2", "spark1"], "img:1") == A  # the first candidate that has one
    assert image_hint("duo", ["spark1"], "img:2") is None and image_hint("other", ["spark1"], "img:1") is None
    remember_image("duo", "spark1", "img:1", B)  # rebuilt on the source
    assert image_hint("duo", ["spark1"], "img:1") == B
    assert not list(hints_path().parent.glob("*.part"))


def test_an_unreadable_or_foreign_hints_file_is_no_hint() -> None:
    hints_path().parent.mkdir(parents=True)
    hints_path().write_text("{not json")
    assert image_hint("duo", ["spark1"], "img:1") is None
    hints_path().write_text('{"duo\\u0000spark1\\u0000img:1": "not an id"}')
    assert image_hint("duo", ["spark1"], "img:1") is None
    remember_image("duo", "spark1", "img:1", A)  # a broken file is replaced whole
    assert image_hint("duo", ["spark1"], "img:1") == A
