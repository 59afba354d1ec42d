"""profile/fleet.py: a fleet's services, their views as single-model profiles, their ports."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.errors import ProfileError, UsageError
from sparkctl.profile import load_profile_file, load_profile_text
from sparkctl.profile.fleet import SINGLE, assign_ports, service_names, service_profile

ROOT = Path(__file__).resolve().parents[3]
SPARKS = ROOT / "profiles" / "fleet-two-sparks.yaml"
BOX = ROOT / "profiles" / "fleet-two-gpu-box.yaml"

HEAD = """cluster: c
nodes:
  - {name: a, address: local, gpus: 2}
"""


def svc(name: str, extra: str = "", mode: str = "{nodes: [a]}") -> str:
    return (
        f"  {name}:\n    image: {{ref: 'img:1'}}\n    model: {{target: {{id: org/{name}}}}}\n"
        f"    engine: {{served_model_name: {name}{extra}}}\n    modes: {{solo: {mode}}}\n"
    )


def fleet(*services: str) -> str:
    return HEAD + "models:\n" + "".join(services)


def error_for(text: str) -> ProfileError:
    with pytest.raises(ProfileError) as err:
        load_profile_text(text, "p.yaml")
    return err.value


def test_a_single_model_profile_is_a_fleet_of_one_that_is_itself() -> None:
    prof = load_profile_file(ROOT / "profiles" / "dual-spark.yaml")
    assert service_names(prof) == [SINGLE]
    assert service_profile(prof, SINGLE) is prof


def test_the_shipped_fleet_has_its_services_with_their_own_parts() -> None:
    prof = load_profile_file(SPARKS)
    assert service_names(prof) == ["chat", "coder"]
    chat, coder = service_profile(prof, "chat"), service_profile(prof, "coder")
    assert (chat.engine.kind, coder.engine.kind) == ("sglang", "vllm")
    assert coder.model.target.id == "Qwen/Qwen2.5-Coder-7B-Instruct-AWQ"
    assert list(chat.modes) == ["tp2", "solo"] and coder.default_mode() == "solo"
    assert not chat.models and not coder.models  # a view is a single-model profile
    # the top level carries the first service (what one-model code reads)
    assert prof.image == chat.image and list(prof.modes) == list(chat.modes)


def test_ports_given_are_kept_and_the_rest_assigned_apart() -> None:
    ports = assign_ports(load_profile_file(SPARKS))
    assert (ports["chat"].port, ports["chat"].assigned) == (8888, False)
    assert (ports["coder"].port, ports["coder"].assigned) == (30000, True)
    assert ports["coder"].dist_init_port == ports["chat"].dist_init_port + 100
    assert ports["coder"].metrics_port == ports["chat"].metrics_port + 1


def test_two_services_without_ports_on_one_node_get_different_ones() -> None:
    prof = load_profile_text(fleet(svc("one"), svc("two")))
    ports = assign_ports(prof)
    assert (ports["one"].port, ports["two"].port) == (30000, 30010)
    assert service_profile(prof, "two").engine.port == 30010


def test_an_assigned_port_steps_over_a_replica_port_of_another_service() -> None:
    replicas = "{nodes: [a], replicas: 2}"  # router on 30000, replicas on 30001 and 30002
    prof = load_profile_text(fleet(svc("one", mode=replicas), svc("two")))
    assert assign_ports(prof)["two"].port == 30010


def test_two_services_given_the_same_port_on_one_node_are_refused() -> None:
    text = fleet(svc("one", ", port: 31000"), svc("two", ", port: 31000"))
    err = error_for(text)
    assert "models.two.engine.port" in err.message and "[ports-distinct]" in err.message
    assert "port 31000 on node 'a'" in err.message and "models.one's" in err.message
    assert "p.yaml:" in err.message  # the line of the key
    assert "leave models.two.engine.port unset" in err.message


def test_the_same_port_on_different_nodes_is_fine() -> None:
    head = "cluster: c\nnodes:\n  - {name: a, address: local}\n  - {name: b, address: b.lan}\nmodels:\n"
    text = head + svc("one", ", port: 31000") + svc("two", ", port: 31000", "{nodes: [b]}")
    prof = load_profile_text(text)
    assert assign_ports(prof)["two"].port == 31000


@pytest.mark.parametrize("key", ["image: {ref: 'x:1'}", "modes: {tp: {nodes: [a]}}"])
def test_a_fleet_keeps_service_parts_out_of_its_top_level(key: str) -> None:
    err = error_for(fleet(svc("one")) + key + "\n")
    name = key.split(":")[0]
    assert f"with `models:` each service has its own {name}" in err.message
    assert f"models.<name>.{name}" in err.message


def test_an_empty_models_is_no_fleet() -> None:
    err = error_for(HEAD + "models: {}\n")
    assert "missing required key 'image'" in err.message  # a single-model profile then


def test_a_dumped_fleet_loads_again_with_its_top_level_parts() -> None:
    from sparkctl.profile.schema import Profile

    prof = load_profile_file(SPARKS)
    again = Profile.model_validate(prof.model_dump(mode="json", exclude_unset=True))
    assert again == prof and assign_ports(again) == assign_ports(prof)


def test_a_service_mode_error_names_the_service_key_path() -> None:
    err = error_for(fleet(svc("one"), svc("two", mode="{nodes: [zz]}")))
    assert "models.two.modes.solo.nodes[0]" in err.message and "unknown node 'zz'" in err.message


def test_a_broken_first_service_is_reported_at_its_own_path() -> None:
    text = fleet(svc("one").replace("image: {ref: 'img:1'}", "image: {}"), svc("two"))
    err = error_for(text)
    text_all = "\n".join([err.message, *(e.message for e in err.also)])
    assert "models.one.image" in text_all
    assert "invalid" not in text_all  # the stand-in top level never shows


def test_memory_gib_of_an_unknown_node_is_refused() -> None:
    err = error_for(fleet(svc("one").replace("    modes:", "    memory_gib: {zz: 10}\n    modes:")))
    assert "models.one.memory_gib.zz: unknown node 'zz'" in err.message


def test_an_unknown_service_is_a_usage_error_listing_the_names() -> None:
    with pytest.raises(UsageError) as err:
        service_profile(load_profile_file(BOX), "nope")
    assert "chat, coder" in (err.value.fix or "")
