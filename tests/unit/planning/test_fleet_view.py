"""planning/fleet_view.py: a fleet's service as the single-model profile every command runs."""

from __future__ import annotations

from pathlib import Path

from sparkctl.planning.build import build_plan
from sparkctl.planning.fleet_view import fleet_lock_name, service_view, service_views
from sparkctl.profile import load_profile_file, load_profile_text

ROOT = Path(__file__).resolve().parents[3]
SPARKS = load_profile_file(ROOT / "profiles" / "fleet-two-sparks.yaml")
GPU = "{name: RTX 5090, memory_gib: 32, compute_capability: '12.0', unified_memory: false}"


def test_a_service_is_its_own_cluster_so_its_containers_state_and_lock_are_its_own() -> None:
    views = service_views(SPARKS)
    assert [v.cluster for v in views.values()] == ["fleetduo-chat", "fleetduo-coder"]
    assert fleet_lock_name(SPARKS) == "fleetduo"  # the one lock more that every start holds
    coder = views["coder"]
    assert not coder.models and coder.engine.kind == "vllm" and list(coder.modes) == ["solo"]
    plan = build_plan(coder, "solo")
    assert plan.ranks[0].container_name == "sparkctl-fleetduo-coder-solo-r0"
    assert plan.ranks[0].labels["sparkctl.cluster"] == "fleetduo-coder"


def test_a_single_model_profile_is_its_own_view() -> None:
    prof = load_profile_file(ROOT / "profiles" / "dual-spark.yaml")
    assert service_view(prof, "model") is prof


def _box(memory: str, args: str = "") -> str:
    return f"""cluster: box
nodes:
  - {{name: a, address: local, gpus: 2, gpu: {GPU}}}
models:
  small:
    image: {{ref: 'img:1'}}
    model: {{target: {{id: org/small}}}}
    engine: {{kind: vllm, args: {{{args}}}}}
    {memory}
    modes: {{solo: {{nodes: [a], gpu_ids: [1]}}}}
"""


def test_a_budget_on_a_discrete_gpu_becomes_the_engines_fraction_of_that_gpu() -> None:
    view = service_view(load_profile_text(_box("memory_gib: 8")), "small")
    assert view.engine.args["gpu-memory-utilization"] == 0.25  # 8 of the GPU's 32 GiB


def test_a_flag_the_profile_sets_is_never_replaced_by_the_budget() -> None:
    view = service_view(load_profile_text(_box("memory_gib: 8", "gpu-memory-utilization: 0.2")), "small")
    assert view.engine.args["gpu-memory-utilization"] == 0.2
    assert "gpu-memory-utilization" not in service_view(load_profile_text(_box("")), "small").engine.args
