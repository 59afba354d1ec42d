"""planning/fleet.py: a fleet's plan as data: services, ranks, budgets per node, sums per node."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.errors import ProfileError, UsageError
from sparkctl.planning.build import build_plan
from sparkctl.planning.fleet import build_fleet, parse_selection, plan_fleet
from sparkctl.profile import load_profile_file, load_profile_text

ROOT = Path(__file__).resolve().parents[3]
SPARKS = load_profile_file(ROOT / "profiles" / "fleet-two-sparks.yaml")
BOX = load_profile_file(ROOT / "profiles" / "fleet-two-gpu-box.yaml")
GB10 = "{name: NVIDIA GB10, memory_gib: 128, compute_capability: '12.1', unified_memory: true}"


def node_sums(fleet) -> dict[str, float]:
    return {n.node: round(n.used_gib, 1) for n in fleet.nodes}


def test_the_two_sparks_fleet_sums_each_services_flag_budget_per_node() -> None:
    fleet = plan_fleet(SPARKS)
    assert [(s.name, s.mode) for s in fleet.services] == [("chat", "tp2"), ("coder", "solo")]
    assert node_sums(fleet) == {"spark1": 80.8, "spark2": 116.8}  # 0.60 x 128 + 4; + 0.25 x 128 + 4
    spark2 = fleet.nodes[1]
    assert spark2.capacity_gib == 124.0 and spark2.fits  # 128 - memory.reserve_gib 4
    chat = fleet.service("chat").shares[0]
    assert chat.basis == "--mem-fraction-static 0.6 x 128 GiB + shm 4 GiB"


def test_a_service_plan_is_the_single_model_plan_with_the_service_in_its_names() -> None:
    fleet = build_fleet(SPARKS)
    chat = fleet.service("chat").plan
    assert [r.container_name for r in chat.ranks] == [
        "sparkctl-fleetduo-chat-tp2-r0",
        "sparkctl-fleetduo-chat-tp2-r1",
    ]
    assert chat.ranks[0].labels["sparkctl.cluster"] == "fleetduo-chat"  # its own lock, state, containers
    assert [c.name for c in chat.stop_first] == ["sparkctl-fleetduo-chat-solo-r0"]  # its own other mode only
    coder = fleet.service("coder").plan
    assert coder.endpoint.port == 30000 and "--port" in coder.ranks[0].argv


def test_a_single_model_profile_is_a_fleet_of_one_with_todays_plan() -> None:
    prof = load_profile_file(ROOT / "profiles" / "dual-spark.yaml")
    fleet = plan_fleet(prof, "tp2")
    assert not fleet.is_fleet and [s.name for s in fleet.services] == ["model"]
    assert fleet.services[0].plan == build_plan(prof, "tp2")


def test_a_single_model_profile_over_its_node_is_shown_not_refused() -> None:
    # dual-spark's tp2: 0.90 x 128 + its 32 GiB private shm is over 124 GiB; admission judges it at `up`
    fleet = plan_fleet(load_profile_file(ROOT / "profiles" / "dual-spark.yaml"), "tp2")
    assert fleet.over and not fleet.is_fleet


def test_discrete_gpus_are_summed_per_gpu() -> None:
    box = plan_fleet(BOX).nodes[0]
    assert not box.unified and box.gpu_gib == 24
    assert {g: round(v, 1) for g, v in box.gpu_sums().items()} == {0: 22.8, 1: 21.6}
    assert "GPU 0: 22.8, GPU 1: 21.6 of 24 GiB each" in box.sum_line()


def test_two_services_on_one_gpu_over_its_memory_are_refused_per_gpu() -> None:
    data = BOX.models["coder"].modes["solo"].model_copy(update={"gpu_ids": [0]})
    coder = BOX.models["coder"].model_copy(update={"modes": {"solo": data}})
    prof = BOX.model_copy(update={"models": {**BOX.models, "coder": coder}})
    with pytest.raises(ProfileError) as err:
        plan_fleet(prof)
    assert err.value.node == "box" and "GPU 0: 44.4" in err.value.message


def fleet_text(memory: str = "", small_args: str = "") -> str:
    host = "container: {ipc: host}"  # no private /dev/shm to count: the budgets alone
    return f"""cluster: c
nodes:
  - {{name: a, address: local, gpu: {GB10}}}
models:
  big:
    image: {{ref: 'img:1'}}
    model: {{target: {{id: org/big}}}}
    engine: {{{host}, args: {{mem-fraction-static: 0.5}}}}
    modes: {{solo: {{nodes: [a]}}}}
  small:
    image: {{ref: 'img:1'}}
    model: {{target: {{id: org/small}}}}
    engine: {{{host}, args: {{{small_args}}}}}
    {memory}
    modes: {{solo: {{nodes: [a]}}}}
"""


def test_private_shm_on_unified_memory_counts_in_the_budget() -> None:
    text = fleet_text(small_args="mem-fraction-static: 0.1").replace("{ipc: host}", "{shm_size: 8g}", 1)
    big = build_fleet(load_profile_text(text)).service("big").shares[0]
    assert (big.gib, big.basis) == (72.0, "--mem-fraction-static 0.5 x 128 GiB + shm 8 GiB")


def test_a_declared_memory_gib_is_the_budget() -> None:
    prof = load_profile_text(fleet_text("memory_gib: 20", "mem-fraction-static: 0.15"))
    fleet = plan_fleet(prof)
    small = fleet.service("small").shares[0]
    assert (small.gib, small.basis) == (20, "memory_gib 20")
    assert node_sums(fleet) == {"a": 84.0}


def test_a_flag_taking_more_than_the_declared_budget_is_refused() -> None:
    with pytest.raises(ProfileError) as err:
        plan_fleet(load_profile_text(fleet_text("memory_gib: 20", "mem-fraction-static: 0.9")))
    assert "models.small: its memory flag takes 115.2 GiB, above its memory_gib 20" in err.value.message
    assert "models.small.engine.args.mem-fraction-static: 0.15" in (err.value.fix or "")


def test_a_budget_without_a_flag_sets_the_flag() -> None:
    # no flag: memory_gib 20 of a 128 GiB GB10 becomes --mem-fraction-static 0.15 (rounded down)
    fleet = plan_fleet(load_profile_text(fleet_text("memory_gib: 20")))
    argv = fleet.service("small").plan.ranks[0].argv
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.15"
    big = fleet.service("big").plan.ranks[0].argv  # a flag the profile sets is kept
    assert big[big.index("--mem-fraction-static") + 1] == "0.5"


def test_selection_names_services_and_modes() -> None:
    assert parse_selection(SPARKS, None) == {"chat": "tp2", "coder": "solo"}
    assert parse_selection(SPARKS, "chat:solo") == {"chat": "solo", "coder": "solo"}
    with pytest.raises(UsageError, match="unknown service 'nope'"):
        parse_selection(SPARKS, "nope:solo")
    with pytest.raises(UsageError, match="unknown mode 'tp4' of service 'chat'") as err:
        parse_selection(SPARKS, "chat:tp4")
    assert "tp2, solo" in (err.value.fix or "")


def test_the_json_has_every_service_its_ranks_and_the_sums_per_node() -> None:
    doc = plan_fleet(SPARKS).to_json()
    assert doc["fleet"] is True and [s["name"] for s in doc["services"]] == ["chat", "coder"]
    assert doc["services"][0]["budget_gib"] == {"spark1": 80.8, "spark2": 80.8}
    assert len(doc["services"][0]["plan"]["ranks"]) == 2
    spark2 = doc["nodes"][1]
    assert (spark2["node"], spark2["used_gib"], spark2["capacity_gib"], spark2["fits"]) == (
        "spark2",
        116.8,
        124.0,
        True,
    )
    assert [s["service"] for s in spark2["services"]] == ["chat", "coder"]


def test_on_demand_services_need_room_one_at_a_time_beside_the_pinned_ones() -> None:
    # big 0.5 + small 0.45 and another 0.45: all three are over 124 GiB; pinned big with either fits
    text = fleet_text("on_demand: true", "mem-fraction-static: 0.45")
    extra = text.split("  small:\n")[1].replace("org/small", "org/other")
    both = load_profile_text(text + "  other:\n" + extra)
    assert build_fleet(both).over  # the sum of all three is shown over the node
    plan_fleet(both)  # and accepted: the supervisor stops one to start the other
    pinned = load_profile_text((text + "  other:\n" + extra).replace("on_demand: true", "", 1))
    with pytest.raises(ProfileError, match="the services' memory does not fit"):
        plan_fleet(pinned)  # small pinned: small + big + other must fit at once
