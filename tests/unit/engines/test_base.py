"""The Engine seam: plan, profile validation and preflight ask the engine, not SGLang by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.engines import ENGINE_NAMES, get_engine
from sparkctl.engines.base import RankLayout, Readiness
from sparkctl.engines.capabilities import MultiNode
from sparkctl.engines.sglang import SGLang
from sparkctl.errors import UsageError
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def profile():
    return load_profile_file(ROOT / "profiles" / "dual-spark.yaml")


class Toy(SGLang):
    """A second engine as a package would provide it (here: another launcher and host-IP variable)."""

    name = "toy"
    multi_node = MultiNode(host_ip_env="TOY_HOST_IP")
    readiness = Readiness(health_path="/ping")

    def rank_argv(self, profile, args, layout: RankLayout) -> list[str]:
        return [
            "toy-serve",
            profile.model.target.id,
            "--world",
            str(layout.nnodes),
            "--rank",
            str(layout.rank),
        ]


def test_sglang_is_the_registered_default_then_vllm_and_llamacpp() -> None:
    assert ENGINE_NAMES == ("sglang", "vllm", "llamacpp") and isinstance(get_engine(), SGLang)
    assert get_engine("vllm").name == "vllm" and get_engine("llamacpp").name == "llamacpp"
    with pytest.raises(UsageError, match="unknown engine 'tgi'"):
        get_engine("tgi")


def test_plan_renders_argv_and_env_through_the_engine(profile, monkeypatch: pytest.MonkeyPatch) -> None:
    sglang = build_plan(profile, "tp2")
    assert sglang.ranks[1].env["SGLANG_HOST_IP"] == "192.168.100.11"
    monkeypatch.setattr("sparkctl.planning.build.get_engine", lambda kind: Toy())
    toy = build_plan(profile, "tp2")
    assert toy.ranks[1].argv == ["toy-serve", profile.model.target.id, "--world", "2", "--rank", "1"]
    assert toy.ranks[1].env["TOY_HOST_IP"] == "192.168.100.11" and "SGLANG_HOST_IP" not in toy.ranks[1].env
    # What is not the engine's (NCCL over the fabric, caches, mounts) stays the same.
    assert toy.ranks[1].env["NCCL_IB_HCA"] == sglang.ranks[1].env["NCCL_IB_HCA"]
    assert toy.ranks[1].mounts == sglang.ranks[1].mounts


def test_plan_refuses_flags_the_engine_manages(profile) -> None:
    from sparkctl.errors import ExitCode, ProfileError

    assert "tp" in get_engine().managed_flags
    bad = profile.model_copy(update={"engine": profile.engine.model_copy(update={"args": {"tp": 2}})})
    with pytest.raises(
        ProfileError, match=r"engine\.args\.tp: 'tp' is set by sparkctl from modes.<mode>.tp"
    ) as err:
        build_plan(bad, "solo")
    assert err.value.exit_code == ExitCode.USAGE
    mode = bad.modes["solo"].model_copy(update={"args": {"node-rank": 1}})
    other = profile.model_copy(update={"modes": {**profile.modes, "solo": mode}})
    with pytest.raises(ProfileError, match=r"modes\.solo\.args\.node-rank: 'node-rank' is set by sparkctl"):
        build_plan(other, "solo")


def test_the_engine_default_command_is_the_engines(profile) -> None:
    from sparkctl.profile.base import ENGINE_KINDS
    from sparkctl.profile.schema import Engine

    assert Engine().command is None  # the profile names no engine's launcher
    argv = build_plan(profile, "solo").ranks[0].argv
    assert argv[: len(get_engine().default_command)] == list(get_engine().default_command)
    from sparkctl.engines import ENGINE_NAMES

    assert ENGINE_NAMES == ENGINE_KINDS  # the profile's pure name list is the registry's


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
def test_the_argv_is_the_whole_launcher_and_a_flag_first_command_is_refused(profile, kind) -> None:
    from sparkctl.errors import ExitCode, ProfileError

    engine = profile.engine.model_copy(update={"kind": kind, "options": {}})  # options are the engine's
    prof = profile.model_copy(update={"engine": engine})
    default = list(get_engine(kind).default_command)
    assert build_plan(prof, "solo").ranks[0].argv[: len(default)] == default
    own = prof.model_copy(update={"engine": engine.model_copy(update={"command": ["/opt/run", "x"]})})
    assert build_plan(own, "solo").ranks[0].argv[:2] == ["/opt/run", "x"]
    # The old workaround for an image whose ENTRYPOINT is the launcher: flags only. The argv now
    # replaces the ENTRYPOINT, so it would run `--model` as the program.
    flags = prof.model_copy(update={"engine": engine.model_copy(update={"command": ["--model"]})})
    with pytest.raises(ProfileError, match=r"engine\.command: \['--model'\] starts with a flag") as err:
        build_plan(flags, "solo")
    assert err.value.exit_code == ExitCode.USAGE and "leave engine.command unset" in (err.value.fix or "")


def test_gb10_cap_is_one_number(profile) -> None:
    from sparkctl.engines.sglang.launch.inputs import GB10_MAX_MEM_FRACTION as launch_cap

    plan = build_plan(profile, "solo")  # every node a GB10: the plan sets the cap
    memory = get_engine().memory
    assert memory is not None and memory.fraction(plan.ranks[0].argv) == memory.gb10_max == launch_cap


def test_fit_and_plan_check_go_through_the_engines_launch_check(tmp_path: Path) -> None:
    """Each engine answers `launch_check` with its own findings; a missing model is refused the
    same way for both when `fit` asks for it (no --allow-missing)."""
    from sparkctl.engines.sglang.launch import CHECK_NAMES as SGLANG_NAMES
    from sparkctl.engines.support.launch_check import LaunchRequest
    from sparkctl.engines.support.models import ModelNotFound
    from sparkctl.engines.vllm.check import CHECK_NAMES as VLLM_NAMES

    offline = LaunchRequest(reach=False, parse_flags=False, target_dir=tmp_path)  # no model there
    for name, names in (("dual-spark.yaml", SGLANG_NAMES), ("vllm-two-gpu-box.yaml", VLLM_NAMES)):
        prof = load_profile_file(ROOT / "profiles" / name)
        launch = get_engine(prof.engine.kind).launch
        assert launch is not None and launch.check_names() == names
        plan = build_plan(prof, prof.default_mode())
        result = launch.launch_check(plan, prof, offline)
        assert result.findings and {f.check for f in result.findings} <= names, name
        with pytest.raises(ModelNotFound, match="model not on this machine"):
            launch.launch_check(
                plan, prof, LaunchRequest(reach=False, require_models=True, target_dir=tmp_path)
            )


def test_the_memory_plan_admission_names_is_the_engines() -> None:
    """SGLang's planner says what a fraction serves; vLLM models no request count (None: the
    admission's fix then names the fraction only)."""
    assert get_engine().memory is not None and get_engine().memory.serving is not None
    memory = get_engine("vllm").memory
    assert memory is not None and memory.serving is None  # vLLM plans no request count
    assert get_engine("llamacpp").memory is None  # llama.cpp reserves no fraction at all


class Peers(Toy):
    """An engine whose ranks dial each other (RPC workers): planning hands it their addresses."""

    multi_node = MultiNode(host_ip_env="TOY_HOST_IP", peers=True)

    def rank_argv(self, profile, args, layout: RankLayout) -> list[str]:
        return ["toy-serve", "--rpc", ",".join(layout.peers)]


def test_an_engine_that_asks_for_peers_gets_the_other_ranks_fabric_addresses(
    profile, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sparkctl.planning.build.get_engine", lambda kind: Peers())
    plan = build_plan(profile, "tp2")
    assert [r.argv[-1] for r in plan.ranks] == ["192.168.100.11", "192.168.100.10"]
    no_peers = type("NoPeers", (Peers,), {"multi_node": MultiNode(host_ip_env="TOY_HOST_IP")})()
    monkeypatch.setattr("sparkctl.planning.build.get_engine", lambda kind: no_peers)
    assert [r.argv[-1] for r in build_plan(profile, "tp2").ranks] == ["", ""]  # not asked: none given


def test_launch_gate_is_the_engines_and_its_releases(profile) -> None:
    """SGLang >= 0.5.23 has --gated-launch-port (read in its srt/distributed/gated_launch.py); an
    older or unknown release, and vLLM, have no gate: their ranks start as before."""
    from sparkctl.engines.sglang.flags import launch_gate

    assert launch_gate("0.5.23") is not None and launch_gate("v0.5.24.post1") is not None
    assert launch_gate("0.5.16") is None and launch_gate(None) is None
    gate = get_engine("sglang").launch_gate(profile)
    assert gate is not None and gate.flag == "--gated-launch-port" and gate.release == "0.5.23"
    assert get_engine("vllm").launch_gate(profile) is None  # the capability absent
    assert get_engine("llamacpp").launch_gate(profile) is None
    sglang = get_engine("sglang")
    args = sglang.serving_args(profile, profile.modes["tp2"])
    gated = sglang.rank_argv(profile, args, RankLayout(1, 2, 2, "10.0.0.1:50051", gate_port=50058))
    assert gated[gated.index("--gated-launch-port") + 1] == "50058"
    assert "--gated-launch-port" not in sglang.rank_argv(profile, args, RankLayout(1, 2, 2, "10.0.0.1:50051"))
