"""`status`'s text: what a replica mode behind sglang-router serves."""

from __future__ import annotations

from pathlib import Path

from sparkctl.commands.status import _render_status
from sparkctl.lifecycle.status import ClusterStatus, ModeStatus, ReplicaStatus
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file
from sparkctl.runtime.readiness import EndpointHealth

ROOT = Path(__file__).resolve().parents[3]


def test_a_vllm_replica_mode_serves_the_replicas_model_not_the_routers_unknown(monkeypatch, capsys) -> None:
    """sglang-router lists vLLM workers' model as "unknown" (it asks SGLang's /model_info); the
    replicas, probed one by one, say what is served."""
    monkeypatch.setenv("SPARKCTL_API_KEY", "k")
    monkeypatch.setenv("COLUMNS", "200")
    plan = build_plan(load_profile_file(ROOT / "profiles" / "vllm-dual-spark.yaml"), "dp2")
    served = plan.groups[0].endpoint.served_model_name
    router = EndpointHealth(True, ["unknown"], True, "ready")
    mode = ModeStatus("dp2", plan, [], router, "h")
    for g in plan.groups:
        ready = EndpointHealth(True, [served], True, "ready")
        mode.replicas.append(ReplicaStatus(g.index, g.head_node, g.worker_url, ready, {}, None, "dp2"))
    _render_status(ClusterStatus("c", modes=[mode]))
    out = " ".join(capsys.readouterr().out.split())
    assert f"mode dp2: ready endpoint {plan.endpoint.api_base} serving {served}" in out, out
