"""commands/fleet.py: which services `up`, `switch`, `down` and `status` of a fleet act on."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.commands.fleet import chosen_services
from sparkctl.errors import UsageError
from sparkctl.profile import load_profile_text

ROOT = Path(__file__).resolve().parents[3]
TEXT = (ROOT / "profiles" / "fleet-two-sparks.yaml").read_text()
ON_DEMAND = TEXT.replace(
    "    modes:\n      solo:\n        nodes: [spark2]",
    "    on_demand: true\n    modes:\n      solo:\n        nodes: [spark2]",
    1,
)


def test_up_without_a_selection_starts_every_service_but_the_on_demand_ones() -> None:
    assert chosen_services(load_profile_text(TEXT), None, "up") == {"chat": None, "coder": None}
    assert chosen_services(load_profile_text(ON_DEMAND), None, "up") == {"chat": None}
    # named, an on-demand service starts now
    assert chosen_services(load_profile_text(ON_DEMAND), "chat:solo,coder", "up") == {
        "chat": "solo",
        "coder": None,
    }


def test_switch_names_the_service_and_the_mode() -> None:
    prof = load_profile_text(TEXT)
    assert chosen_services(prof, "chat:solo", "switch") == {"chat": "solo"}
    with pytest.raises(UsageError, match="names the service and the mode") as err:
        chosen_services(prof, "chat", "switch")
    assert "switch chat MODE" in (err.value.fix or "")
    with pytest.raises(UsageError, match="unknown service 'nope'"):
        chosen_services(prof, "nope", "down")


def test_a_services_failure_names_the_service_and_what_already_runs() -> None:
    from sparkctl.commands.fleet import _named
    from sparkctl.errors import SparkctlError

    with pytest.raises(SparkctlError) as err, _named("coder", ["chat"]):
        raise SparkctlError("rank 0 exited", node="spark2", rank=0)
    assert err.value.message.startswith("service coder: rank 0 exited (chat started and left running")
    assert (err.value.node, err.value.rank) == ("spark2", 0)
