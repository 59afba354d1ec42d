"""lifecycle/fleet_gateway.py: the fleet gateway as the runtime starts it (its container, labels,
hash); started and replaced for real in the testbed (test_realengine's fleet test)."""

from __future__ import annotations

from pathlib import Path

from sparkctl.lifecycle.fleet_gateway import planned_gateway
from sparkctl.profile import load_profile_file, load_profile_text

ROOT = Path(__file__).resolve().parents[3]
TEXT = (ROOT / "profiles" / "fleet-two-sparks.yaml").read_text()


def test_the_gateway_is_the_fleets_own_container_and_covers_every_service() -> None:
    gw = planned_gateway(load_profile_file(ROOT / "profiles" / "fleet-two-sparks.yaml"))
    c = gw.container
    assert c.container_name == "sparkctl-fleetduo-gateway" and c.node == "spark1"
    assert c.labels["sparkctl.cluster"] == "fleetduo"  # `down` of the fleet finds it, no service's down does
    assert c.options.user == "node" and c.options.read_only and c.gpus == 0
    assert gw.to_json()["services"]["coder"]["names"] == ["qwen2.5-coder-7b"]
    assert gw.url == "http://127.0.0.1:8000"


def test_a_default_mode_change_keeps_the_gateway_a_new_port_replaces_it() -> None:
    before = planned_gateway(load_profile_text(TEXT)).container.labels["sparkctl.config_hash"]
    flipped = TEXT.replace("default: true\n", "\n", 1)  # chat's default mode moves: same routes
    assert planned_gateway(load_profile_text(flipped)).container.labels["sparkctl.config_hash"] == before
    moved = TEXT.replace("models:\n", "gateway: {port: 8100}\nmodels:\n", 1)
    assert planned_gateway(load_profile_text(moved)).container.labels["sparkctl.config_hash"] != before
