"""A rank's command and env under Kubernetes: literal words stay literal, the node's env file is
sourced, a node without one stops the pod with its name."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from k8s_schemas import k8s_expand

from sparkctl.errors import UsageError
from sparkctl.export.k8s_rank import NODE_ENV_DIR, env_file, escape, split_env, wrapper_command
from sparkctl.planning.hardening import RunOptions
from sparkctl.planning.model import RankSpec
from sparkctl.secrets import SecretRef


@pytest.mark.parametrize("word", ["$(HOME)", "a$$(b)", "$$", "x$", "$(", "plain", "$$$(X)"])
def test_escaped_words_survive_kubernetes_expansion(word: str) -> None:
    env = {"HOME": "/root", "X": "1", "b": "2"}
    assert k8s_expand(escape(word), env) == word
    if word in {"$(HOME)", "a$$(b)", "$$", "$$$(X)"}:
        assert k8s_expand(word, env) != word  # without the escape Kubernetes would change it


def rank(node: str, env: dict, n: int = 0) -> RankSpec:
    return RankSpec(n, node, f"c{n}", "img", ["serve"], env, [], RunOptions())


def test_env_splits_into_common_and_per_node() -> None:
    common, per_node = split_env(
        [rank("a", {"K": "1", "IP": "10.0.0.1"}), rank("b", {"K": "1", "IP": "10.0.0.2"}, 1)]
    )
    assert common == {"K": "1"}
    assert per_node == {"a": {"IP": "10.0.0.1"}, "b": {"IP": "10.0.0.2"}}


def test_a_node_whose_ranks_disagree_is_refused() -> None:
    with pytest.raises(UsageError, match="node a: its ranks need different env"):
        split_env([rank("a", {"IP": "1"}), rank("a", {"IP": "2"}, 1), rank("b", {"IP": "3"}, 2)])


def test_a_secret_value_in_env_is_refused() -> None:
    with pytest.raises(UsageError, match="env TOKEN holds a secret value"):
        split_env([rank("a", {"TOKEN": SecretRef("t", env="T")})])


def _run_wrapper(tmp: Path, node: str, files: dict[str, str]) -> subprocess.CompletedProcess:
    for name, text in files.items():
        (tmp / name).write_text(text)
    cmd = wrapper_command(["/bin/sh", "-c", 'printf "%s|%s" "$IP" "$1"', "-", "arg with 'quotes'"], "cm")
    cmd[2] = cmd[2].replace(NODE_ENV_DIR, str(tmp))
    env = {"PATH": "/usr/bin:/bin", "SPARKCTL_NODE": node}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=30)


def test_the_wrapper_sources_the_nodes_file_and_execs_the_argv(tmp_path: Path) -> None:
    res = _run_wrapper(tmp_path, "spark2", {"spark2.env": env_file({"IP": "a b'$(c)"})})
    assert res.returncode == 0, res.stderr
    assert res.stdout == "a b'$(c)|arg with 'quotes'"


def test_the_wrapper_stops_on_a_node_without_a_file(tmp_path: Path) -> None:
    res = _run_wrapper(tmp_path, "stranger", {"spark2.env": "IP=1\n"})
    assert res.returncode == 1
    assert "no env file for node stranger in ConfigMap cm" in res.stderr


def test_vllm_rendezvous_split_over_master_addr_and_port(monkeypatch) -> None:
    from pathlib import Path

    from sparkctl.engines import get_engine
    from sparkctl.export.k8s_rank import LWS_GROUP_SIZE, LWS_LEADER_ADDRESS, LWS_WORKER_INDEX, lws_argv
    from sparkctl.planning.build import build_plan
    from sparkctl.profile import load_profile_file

    monkeypatch.setenv("SPARKCTL_API_KEY", "k")
    root = Path(__file__).resolve().parents[3]
    plan = build_plan(load_profile_file(root / "profiles" / "vllm-dual-spark.yaml"), "tp2")
    argv = lws_argv(plan, plan.ranks[1], get_engine("vllm").layout_flags)
    at = {w: argv[i + 1] for i, w in enumerate(argv[:-1]) if w.startswith("--")}
    assert at["--master-addr"] == LWS_LEADER_ADDRESS and at["--master-port"] == "50051"
    assert at["--nnodes"] == LWS_GROUP_SIZE and at["--node-rank"] == LWS_WORKER_INDEX
    assert argv[-1] == "--headless"
