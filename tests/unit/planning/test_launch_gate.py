"""The gated start in the plan (planning/launch_gate.py): which groups start behind the engine's
launch gate, its port on every rank, where sparkctl opens it, and what `plan` says."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sparkctl.errors import ProfileError
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_text

ROOT = Path(__file__).resolve().parents[3]
FLAG = "--gated-launch-port"


def shipped(name: str, **memory) -> dict:
    data = yaml.safe_load((ROOT / "profiles" / f"{name}.yaml").read_text())
    data.setdefault("memory", {}).update(memory)
    return data


def plan_of(data: dict, mode: str):
    return build_plan(load_profile_text(yaml.safe_dump(data, sort_keys=False)), mode)


def gate_port(argv: list[str]) -> str | None:
    return argv[argv.index(FLAG) + 1] if FLAG in argv else None


def test_a_gated_tp2_puts_the_gate_on_every_rank_and_opens_it_on_rank_0s_node() -> None:
    plan = plan_of(shipped("dual-spark", gated_start=True), "tp2")
    assert [gate_port(r.argv) for r in plan.ranks] == ["50058", "50058"]  # dist_init_port + 7, both ranks
    (group,) = plan.groups
    gate = group.gate
    assert gate is not None and (gate.node, gate.host, gate.port) == ("spark1", "127.0.0.1", 50058)
    assert gate.nodes == ["spark1", "spark2"] and gate.url == "http://127.0.0.1:50058"
    assert gate.protocol.activate_path == "/gate/activate" and gate.protocol.health_path == "/health"
    assert plan.notes == [
        "replica 0 starts gated: --gated-launch-port 50058 on spark1 (127.0.0.1): admission on "
        "spark1, spark2 after the rendezvous, then POST /gate/activate"
    ]
    doc = plan.to_json()
    assert doc["groups"][0]["gate"] == {
        "node": "spark1",
        "host": "127.0.0.1",
        "port": 50058,
        "nodes": ["spark1", "spark2"],
    }
    assert doc["notes"] == plan.notes


def test_off_by_default_and_one_node_groups_are_never_gated() -> None:
    plain = plan_of(shipped("dual-spark"), "tp2")
    assert all(FLAG not in r.argv for r in plain.ranks) and plain.groups[0].gate is None
    assert plain.notes == []
    gated = shipped("dual-spark", gated_start=True)
    for mode in ("solo", "dp2"):  # nothing to rendezvous with: admission before the start suffices
        plan = plan_of(gated, mode)
        assert all(FLAG not in r.argv for r in plan.ranks) and all(g.gate is None for g in plan.groups)
    assert plan_of(gated, "tp2").config_hash != plain.config_hash  # the gate reaches the container


def test_each_gated_replica_has_its_own_gate_on_its_own_head() -> None:
    plan = plan_of(shipped("quad-spark", gated_start=True), "tp2x2")
    gates = [g.gate for g in plan.groups]
    assert [(g.node, g.port, g.nodes) for g in gates if g] == [
        ("spark1", 50058, ["spark1", "spark2"]),
        ("spark3", 50058, ["spark3", "spark4"]),
    ]
    assert [gate_port(r.argv) for r in plan.ranks] == ["50058"] * 4


def test_a_release_or_engine_without_the_gate_starts_as_before_and_the_plan_says_so() -> None:
    old = shipped("dual-spark", gated_start=True)
    old["engine"]["options"] = {"version": "0.5.12"}
    plan = plan_of(old, "tp2")
    assert all(FLAG not in r.argv for r in plan.ranks) and plan.groups[0].gate is None
    assert plan.notes == [
        "memory.gated_start: sglang 0.5.12 has no launch gate sparkctl knows: the groups start ungated "
        "(admission before the start only)"
    ]
    del old["engine"]["options"]
    (note,) = plan_of(old, "tp2").notes
    assert "release unknown" in note and "set engine.options.version to the image's release" in note
    vllm = plan_of(shipped("vllm-dual-spark", gated_start=True), "tp2")
    assert vllm.groups[0].gate is None and all(FLAG not in r.argv for r in vllm.ranks)
    assert vllm.notes == [
        "memory.gated_start: vllm has no launch gate sparkctl knows: the groups start ungated "
        "(admission before the start only)"
    ]


def test_a_gate_on_every_address_is_a_security_warning() -> None:
    data = shipped("dual-spark", gated_start=True)
    data["engine"]["front"] = False
    plan = plan_of(data, "tp2")
    gate = plan.groups[0].gate
    assert gate is not None and gate.host == "0.0.0.0" and gate.reach == "127.0.0.1"
    assert any("/gate/activate takes no key" in w and "0.0.0.0:50058" in w for w in plan.warnings)
    assert not any("gate" in w for w in plan_of(shipped("dual-spark", gated_start=True), "tp2").warnings)


def test_the_gate_port_is_sparkctls_and_checked_against_the_others() -> None:
    data = shipped("dual-spark", gated_start=True)
    data["engine"]["args"]["gated-launch-port"] = 41000
    with pytest.raises(ProfileError) as err:
        plan_of(data, "tp2")
    assert "memory.gated_start" in str(err.value) + str(err.value.fix)
    clash = shipped("dual-spark", gated_start=True)
    clash["engine"]["port"] = 50058
    with pytest.raises(ProfileError) as exc:
        plan_of(clash, "tp2")
    assert "port 50058 on node 'spark1' is both replica 0's API port and replica 0's launch gate" in str(
        exc.value
    )
    clash["memory"]["gated_start"] = False
    plan_of(clash, "tp2")  # ungated, the port is free
