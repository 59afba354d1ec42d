"""A rank's container env, mounts and GPUs: NCCL over the fabric, secrets as files, the GPU request."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparkctl.planning.build import PlanFacts, build_plan
from sparkctl.planning.rank_env import gpu_request
from sparkctl.profile import load_profile_file, load_profile_text

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("HOME", "/home/spark")
    return "/home/spark"


def load(name: str):
    return load_profile_file(ROOT / "profiles" / name)


def test_secret_file_is_mounted_read_only_with_path_env(home: str) -> None:
    spec = build_plan(load("solo-spark.yaml"), "solo").ranks[0]
    assert spec.env["HF_TOKEN_PATH"] == "/run/secrets/HF_TOKEN"
    assert any(m.target == "/run/secrets/HF_TOKEN" and m.read_only for m in spec.mounts)
    assert "HF_TOKEN" not in spec.env


def test_auto_hcas_are_unresolved_until_facts_arrive(home: str) -> None:
    text = re.sub(r"hcas: \[.*", "hcas: auto", (ROOT / "profiles" / "dual-spark.yaml").read_text())
    prof = load_profile_text(text)
    plan = build_plan(prof, "tp2")
    assert plan.unresolved and plan.rank(0).env["NCCL_IB_HCA"] == "<auto>"
    done = build_plan(prof, "tp2", PlanFacts(hcas={"spark1": ["mlx5_0"], "spark2": ["mlx5_1"]}))
    assert not done.unresolved
    assert [r.env["NCCL_IB_HCA"] for r in done.ranks] == ["mlx5_0", "mlx5_1"]


def test_tcp_transport_disables_ib(home: str) -> None:
    text = (ROOT / "profiles" / "dual-spark.yaml").read_text().replace("transport: roce", "transport: tcp")
    env = build_plan(load_profile_text(text), "tp2").rank(1).env
    assert env["NCCL_IB_DISABLE"] == "1" and "NCCL_IB_HCA" not in env


def test_gpu_request_is_all_of_the_node_or_this_ranks_ids(home: str) -> None:
    prof = load("solo-spark.yaml")
    two = prof.nodes[0].model_copy(update={"gpus": 2})
    assert gpu_request(two, (0, 1), prof) == "all"
    assert gpu_request(two, (1,), prof) == "1"
    container = prof.engine.container.model_copy(update={"gpus": False})
    cpu_only = prof.model_copy(update={"engine": prof.engine.model_copy(update={"container": container})})
    assert gpu_request(two, (0,), cpu_only) is None
