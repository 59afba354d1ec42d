"""A mode whose planned rank is not running is broken, whatever the engine's /health says (vLLM's
answers 200 with its TP peer dead; its rank 0 then exits with code 0)."""

from __future__ import annotations

from pathlib import Path

from sparkctl.lifecycle.status import ModeStatus
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file
from sparkctl.runtime.containers import ContainerInfo
from sparkctl.runtime.readiness import EndpointHealth

ROOT = Path(__file__).resolve().parents[3]


def _info(spec, status: str, code: int | None) -> ContainerInfo:
    return ContainerInfo(
        spec.node, spec.container_name, "id", status, code, False, None, None, "img", "sha", spec.labels
    )


def test_a_dead_rank_breaks_a_mode_whose_endpoint_still_says_ready(monkeypatch) -> None:
    monkeypatch.setenv("SPARKCTL_API_KEY", "k")
    plan = build_plan(load_profile_file(ROOT / "profiles" / "vllm-dual-spark.yaml"), "tp2")
    r0, r1 = plan.ranks
    ready = EndpointHealth(True, ["qwen3-30b-a3b"], True, "ready")
    both = ModeStatus("tp2", plan, [_info(r0, "running", None), _info(r1, "running", None)], ready, "h")
    assert both.dead_rank() is None and both.to_json()["broken"] is None
    dead = ModeStatus("tp2", plan, [_info(r0, "running", None), _info(r1, "exited", 137)], ready, "h")
    assert dead.dead_rank() == "rank 1 on spark2 is exited (exit code 137)"
    gone = ModeStatus("tp2", plan, [_info(r0, "exited", 0)], ready, "h")
    assert gone.dead_rank() == "rank 0 on spark1 is exited (exit code 0)"


def test_a_gateway_that_outlived_its_rank_does_not_make_the_mode_run(monkeypatch) -> None:
    from sparkctl.lifecycle import status
    from sparkctl.planning.gateway_container import gateway_container

    monkeypatch.setenv("SPARKCTL_API_KEY", "k")
    profile = load_profile_file(ROOT / "profiles" / "vllm-dual-spark.yaml")
    plan = build_plan(profile, "tp2")
    r0, r1 = plan.ranks
    gate = gateway_container(r0)
    listed: list[ContainerInfo] = []
    monkeypatch.setattr(status.containers, "list_nodes", lambda pool, cluster, nodes: (listed, {}))
    listed[:] = [_info(gate, "running", None), _info(r0, "exited", 0), _info(r1, "exited", 137)]
    assert status.running_mode(profile, None) is None  # only the gateway runs: no mode does
    listed[0:2] = [_info(gate, "running", None), _info(r0, "running", None)]
    assert status.running_mode(profile, None) == "tp2"


def test_named_keys_counts_come_from_the_gateway_with_the_operators_key(monkeypatch) -> None:
    from sparkctl.clients.gateway import KeyCount
    from sparkctl.lifecycle import status

    monkeypatch.setenv("SPARKCTL_API_KEY", "sk-op")
    monkeypatch.setenv("ALICE", "sk-alice")
    profile = load_profile_file(ROOT / "profiles" / "vllm-dual-spark.yaml")
    engine = type(profile.engine).model_validate(
        {**profile.engine.model_dump(exclude_unset=True), "api_keys": {"alice": {"env": "ALICE"}}}
    )
    named = profile.model_copy(update={"engine": engine})
    asked: list[tuple[str, str]] = []
    monkeypatch.setattr(
        status, "key_counts", lambda url, key: asked.append((url, key)) or [KeyCount("alice", 2)]
    )
    plain = ModeStatus("tp2", build_plan(profile, "tp2"), [], EndpointHealth(), None)
    status._key_counts(plain.plan, plain)
    assert plain.keys is None and not asked  # no named keys: nothing asked
    st = ModeStatus("tp2", build_plan(named, "tp2"), [], EndpointHealth(), None)
    status._key_counts(st.plan, st)
    assert asked == [(st.plan.endpoint.url, "sk-op")] and st.to_json()["keys"][0]["requests"] == 2
    monkeypatch.delenv("SPARKCTL_API_KEY")
    unread = ModeStatus("tp2", build_plan(named, "tp2"), [], EndpointHealth(), None)
    status._key_counts(unread.plan, unread)
    assert unread.keys is None and "engine.api_key" in (unread.keys_error or "")
