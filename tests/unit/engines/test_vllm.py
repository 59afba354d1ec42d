"""vLLM as the second engine: argv/env per rank, the key file, managed flags, readiness, metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkctl.engines import get_engine
from sparkctl.engines.vllm import flags as F
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def dual(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SPARKCTL_API_KEY", "sk-test")
    return load_profile_file(ROOT / "profiles" / "vllm-dual-spark.yaml")


def test_tp2_over_two_nodes_is_one_vllm_serve_per_node_rank1_headless(dual) -> None:
    plan = build_plan(dual, "tp2")
    r0, r1 = plan.ranks
    assert r0.argv[:3] == ["vllm", "serve", "Qwen/Qwen3-30B-A3B-FP8"]
    for spec, rank in ((r0, "0"), (r1, "1")):
        argv = " ".join(spec.argv)
        assert "--tensor-parallel-size 2 --nnodes 2 --node-rank " + rank in argv
        assert "--master-addr 192.168.100.10 --master-port 50051" in argv
    assert r0.argv[-4:] == ["--host", "127.0.0.1", "--port", "18888"]  # behind its gateway
    assert (r0.gateway.listen, r0.gateway.port, r0.gateway.upstream_port) == ("0.0.0.0", 8888, 18888)
    assert r1.argv[-1] == "--headless" and "--host" not in r1.argv and "--port" not in r1.argv
    assert r0.env["VLLM_HOST_IP"] == "192.168.100.10" and r1.env["VLLM_HOST_IP"] == "192.168.100.11"
    assert r1.env["GLOO_SOCKET_IFNAME"] == "enp1s0f1np1" and r1.env["NCCL_IB_HCA"]
    assert plan.endpoint.readiness == get_engine("vllm").readiness


def test_solo_has_no_multi_node_flags_and_the_key_goes_in_a_config_file(dual) -> None:
    (r0,) = build_plan(dual, "solo").ranks
    assert "--nnodes" not in r0.argv and "--headless" not in r0.argv and "VLLM_HOST_IP" not in r0.env
    assert r0.argv[r0.argv.index("--config") + 1] == F.KEY_FILE
    assert "sk-test" not in json.dumps(r0.argv) + json.dumps({k: str(v) for k, v in r0.env.items()})
    (key_file,) = [f for f in r0.secrets if f.target == F.KEY_FILE]
    assert key_file.yaml_key == "api-key"


def _with(profile, **engine):
    from sparkctl.profile.schema import Profile

    data = profile.model_dump(mode="json", exclude_none=True)
    data["engine"].update(engine)
    return Profile.model_validate(data)


def test_managed_flags_and_keys_follow_engine_kind(dual) -> None:
    from sparkctl.errors import ProfileError

    assert dual.engine.command is None and build_plan(dual, "solo").ranks[0].argv[:2] == ["vllm", "serve"]
    for flag, source in (("tensor-parallel-size", "modes.<mode>.tp"), ("headless", "every rank but 0")):
        bad = _with(dual, args={**dual.engine.args, flag: 2})
        with pytest.raises(ProfileError, match=f"engine.args.{flag}: .*{source}"):
            build_plan(bad, "tp2")
    with pytest.raises(ProfileError, match="has no admin key"):
        build_plan(_with(dual, admin_api_key={"env": "A"}), "solo")
    data = dual.model_dump(mode="json", exclude_none=True)
    data["modes"]["solo"]["args"] = {"master-port": 1234}
    from sparkctl.profile.schema import Profile

    with pytest.raises(ProfileError, match=r"modes.solo.args.master-port"):
        build_plan(Profile.model_validate(data), "solo")


def test_speculative_config_from_the_draft_and_user_keys() -> None:
    spec = json.loads(F.speculative_config("z-lab/draft", "abc1234", '{"num_speculative_tokens": 4}'))
    assert spec == {
        "method": "dflash",
        "model": "z-lab/draft",
        "revision": "abc1234",
        "num_speculative_tokens": 4,
    }


def test_mem_fraction_reads_both_spellings() -> None:
    assert F.mem_fraction(["vllm", "serve", "m", "--gpu-memory-utilization", "0.8"]) == 0.8
    assert F.mem_fraction(["--gpu-memory-utilization=0.7"]) == 0.7
    assert F.mem_fraction(["vllm", "serve", "m"]) is None


def test_gb10_gets_the_cap_as_default(dual) -> None:
    data = dual.model_dump(mode="json", exclude_none=True)
    del data["engine"]["args"]["gpu-memory-utilization"]
    from sparkctl.profile.schema import Profile

    plan = build_plan(Profile.model_validate(data), "solo")
    assert get_engine("vllm").memory.fraction(plan.ranks[0].argv) == F.GB10_MAX_MEM_FRACTION


def test_an_abbreviated_managed_flag_is_read_as_vllm_would(dual) -> None:
    from sparkctl.errors import ProfileError

    bad = _with(dual, args={**dual.engine.args, "master-a": "10.0.0.1"})
    with pytest.raises(ProfileError, match="reads it as --master-addr"):
        build_plan(bad, "tp2")
    assert "gpu-memory-utilization" in get_engine("vllm").cli_flags
