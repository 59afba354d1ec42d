"""lifecycle/upship.py: `up --ship` runs up; on a shippable preflight failure that the caller
agrees to, ships what was missing and runs up again with what is left of the one deadline."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from sparkctl.lifecycle import upship
from sparkctl.lifecycle.up import PreflightFailedError
from sparkctl.profile.load import load_profile_file

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def profile(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HOME", "/home/spark")
    return load_profile_file(ROOT / "profiles" / "dual-spark.yaml")


def test_ship_then_up_again_with_the_deadline_left(profile, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict] = []

    def fake_up(prof, pool, **kw):  # noqa: ANN001, ANN003, ANN202
        calls.append(kw)
        if len(calls) == 1:
            raise PreflightFailedError("weights missing")
        return "result"

    shipped: list[tuple[bool, bool]] = []
    monkeypatch.setattr(upship, "up", fake_up)
    monkeypatch.setattr(
        "sparkctl.ship.ship", lambda p, plan, pool, image, weights, progress: shipped.append((image, weights))
    )
    got = upship.up_or_ship(
        profile,
        None,  # type: ignore[arg-type]
        offer=lambda exc: {"weights"},
        progress=lambda: contextlib.nullcontext(None),  # type: ignore[arg-type,return-value]
        mode="tp2",
        timeout=600.0,
        rolling=False,
    )
    assert got == "result" and shipped == [(False, True)]
    first, second = calls
    assert first["mode"] == second["mode"] == "tp2" and first["rolling"] is second["rolling"] is False
    assert first["timeout"] == 600.0 and 0 < second["timeout"] <= 600.0


def test_a_refused_offer_lets_the_preflight_error_stand(profile, monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_up(prof, pool, **kw):  # noqa: ANN001, ANN003, ANN202
        raise PreflightFailedError("image missing")

    monkeypatch.setattr(upship, "up", fake_up)
    with pytest.raises(PreflightFailedError, match="image missing"):
        upship.up_or_ship(profile, None, offer=lambda exc: set(), progress=contextlib.nullcontext)  # type: ignore[arg-type]
