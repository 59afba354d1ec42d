"""`status`'s text: what a replica mode behind sglang-router serves."""

from __future__ import annotations

from pathlib import Path

from sparkctl.commands.status import render_status
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
    render_status(ClusterStatus("c", modes=[mode]))
    out = " ".join(capsys.readouterr().out.split())
    assert f"mode dp2: ready endpoint {plan.endpoint.api_base} serving {served}" in out, out


def test_a_node_that_never_answers_ssh_is_named_while_status_waits(tmp_path: Path) -> None:
    """An sshd that accepts and never answers: status printed nothing until the connect timed out."""
    import socket

    import yaml
    from typer.testing import CliRunner

    from sparkctl.cli import app

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)  # accepts (the kernel's backlog), never says a word
        data = yaml.safe_load((ROOT / "profiles" / "dual-spark.yaml").read_text())
        data["nodes"][1].update(address="127.0.0.1", port=silent.getsockname()[1])
        data["ssh"] = {**data["ssh"], "connect_timeout": 3, "known_hosts": str(tmp_path / "known_hosts")}
        path = tmp_path / "p.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        env = {"COLUMNS": "200", "DOCKER_HOST": f"unix://{tmp_path}/none.sock", "SPARKCTL_API_KEY": "k",
               "HF_TOKEN": "t", "HOME": str(tmp_path)}  # fmt: skip
        res = CliRunner().invoke(app, ["-p", str(path), "status", "tp2"], env=env)
    assert res.exit_code == 5, res.output
    first = res.stderr.splitlines()[0]  # spark1's missing Docker answers at once, unless loaded
    assert first.startswith("still waiting for ") and "spark2 (2 s)..." in first, res.stderr
