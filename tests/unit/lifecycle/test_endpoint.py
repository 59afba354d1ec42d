"""lifecycle/endpoint.py: which endpoint verify and bench talk to; a fleet's `--model NAME` is
its one endpoint, asked for the served name, with that service's key."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.errors import UsageError
from sparkctl.lifecycle.endpoint import resolve_endpoint
from sparkctl.profile import load_profile_file

ROOT = Path(__file__).resolve().parents[3]
SPARKS = load_profile_file(ROOT / "profiles" / "fleet-two-sparks.yaml")


def test_a_fleets_model_is_asked_at_its_one_endpoint_by_served_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKCTL_API_KEY", "k-fleet")
    by_service = resolve_endpoint(lambda: SPARKS, None, None, "coder")
    by_name = resolve_endpoint(lambda: SPARKS, None, None, "qwen2.5-coder-7b")
    assert by_service == by_name
    assert (by_service.url, by_service.model, by_service.api_key) == (
        "http://127.0.0.1:8000",
        "qwen2.5-coder-7b",
        "k-fleet",
    )


def test_a_model_the_fleet_does_not_serve_names_those_it_does() -> None:
    with pytest.raises(UsageError, match="the fleet serves no model 'nope'") as err:
        resolve_endpoint(lambda: SPARKS, None, None, "nope")
    assert "qwen2.5-coder-7b" in (err.value.fix or "")
    with pytest.raises(UsageError, match="MODE and --model are exclusive"):
        resolve_endpoint(lambda: SPARKS, "chat:solo", None, "coder")


def test_a_single_model_profile_still_wants_url_with_model() -> None:
    prof = load_profile_file(ROOT / "profiles" / "dual-spark.yaml")
    with pytest.raises(UsageError, match="--url and --model go together"):
        resolve_endpoint(lambda: prof, None, None, "m")
