"""resolve_mode: MODE, --tp, then the fallbacks each command names, in order."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.errors import UsageError
from sparkctl.lifecycle import state, status
from sparkctl.lifecycle.modes import resolve_mode
from sparkctl.profile import load_profile_file

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def prof():
    return load_profile_file(ROOT / "profiles" / "dual-spark.yaml")


@pytest.fixture
def running(monkeypatch: pytest.MonkeyPatch):
    """What runs now (status.running_mode) and the last attempt's mode (state.last_attempt)."""
    now: dict = {"running": None, "last": None}
    monkeypatch.setattr(status, "running_mode", lambda profile, pool: now["running"])
    monkeypatch.setattr(state, "last_attempt", lambda cluster: {"mode": now["last"]} if now["last"] else {})
    return now


def test_mode_and_tp_win_over_every_fallback(prof, running) -> None:
    other = next(m for m in prof.modes if m != prof.default_mode())
    running["running"] = prof.default_mode()
    assert resolve_mode(prof, other, pool=object(), fallback=("running",)) == other
    tp = prof.modes[other].tp
    if sum(m.tp == tp for m in prof.modes.values()) == 1:
        assert resolve_mode(prof, tp=tp, pool=object(), fallback=("running",)) == other
    with pytest.raises(UsageError, match="no mode with tp=99"):
        resolve_mode(prof, tp=99)


def test_fallbacks_in_the_order_the_command_names(prof, running) -> None:
    other = next(m for m in prof.modes if m != prof.default_mode())
    assert resolve_mode(prof) == prof.default_mode()  # up: the profile's default
    logs = ("running", "last", "default")
    assert resolve_mode(prof, pool=object(), fallback=logs) == prof.default_mode()
    running["last"] = other
    assert resolve_mode(prof, pool=object(), fallback=logs) == other
    running["last"] = "a-mode-this-profile-lost"  # not a mode of the profile: skipped
    assert resolve_mode(prof, pool=object(), fallback=logs) == prof.default_mode()
    running["running"] = other
    assert resolve_mode(prof, pool=object(), fallback=("running", "default")) == other


def test_nothing_found_says_what_the_command_needed(prof, running) -> None:
    with pytest.raises(UsageError, match="no mode is running to supervise") as err:
        resolve_mode(
            prof,
            pool=object(),
            fallback=("running",),
            missing=("no mode is running to supervise", "name MODE"),
        )
    assert err.value.fix == "name MODE"
