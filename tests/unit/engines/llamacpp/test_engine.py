"""llama.cpp's llama-server planned through the seam: argv, the key file, what it lacks refused."""

from __future__ import annotations

import textwrap

import pytest

from sparkctl.engines import get_engine, launch_safety
from sparkctl.engines.llamacpp import flags as F
from sparkctl.errors import ExitCode, ProfileError
from sparkctl.planning.build import build_plan
from sparkctl.profile.schema import Profile
from sparkctl.secrets import render_files

COMMIT = "0123456789abcdef0123456789abcdef01234567"
GGUF = "/root/.cache/huggingface/hub/models--ggml-org--tiny/snapshots/" + COMMIT + "/tiny-q8_0.gguf"

PROFILE = f"""
cluster: llama
nodes:
  - {{name: box1, address: 10.0.0.11, gpus: 2, fabric: {{netdevs: [enp1], ip: 192.168.100.10}}}}
  - {{name: box2, address: 10.0.0.12, gpus: 2, fabric: {{netdevs: [enp1], ip: 192.168.100.11}}}}
image: {{ref: "ghcr.io/ggml-org/llama.cpp:server-cuda"}}
model:
  target: {{id: ggml-org/tiny, revision: {COMMIT}}}
engine:
  kind: llamacpp
  host: 0.0.0.0
  served_model_name: tiny
  api_key: {{env: LLAMA_TEST_KEY}}
  options: {{gguf_file: tiny-q8_0.gguf}}
  args: {{ctx-size: 4096}}
modes:
  solo: {{nodes: [box1], default: true}}
  dp2: {{nodes: [box1, box2], replicas: 2}}
  pair: {{nodes: [box1, box2], tp: 2}}
"""


def profile(**engine) -> Profile:
    import yaml

    data = yaml.safe_load(textwrap.dedent(PROFILE))
    data["engine"].update(engine)
    return Profile.model_validate({k: v for k, v in data.items()})


def test_a_solo_rank_runs_llama_server_on_the_shipped_gguf_with_its_key_in_a_file() -> None:
    plan = build_plan(profile(), "solo")
    (rank,) = plan.ranks
    assert rank.argv[:-4] == [
        "/app/llama-server",  # where llama.cpp's server images have it (not on PATH)
        "--model",
        GGUF,
        "--alias",
        "tiny",
        "--n-gpu-layers",
        "999",
        "--ctx-size",
        "4096",
        "--no-slots",
        "--api-key-file",
        F.KEY_FILE,
    ]
    assert rank.argv[-4] == "--host" and rank.argv[-2] == "--port"  # where planning binds it
    assert "SGLANG_HOST_IP" not in rank.env and not any(k.endswith("_HOST_IP") for k in rank.env)
    assert plan.groups[0].endpoint.readiness.health_path == "/health"


def test_the_key_file_holds_the_key_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--api-key-file` reads one key a line: no YAML `api-key:` in front of it."""
    monkeypatch.setenv("LLAMA_TEST_KEY", "s3cr3t-key")
    (rank,) = build_plan(profile(), "solo").ranks
    (key,) = [f for f in rank.secrets if f.target == F.KEY_FILE]
    assert key.yaml_key is None and not key.bind
    assert render_files(rank.secrets, None) == {F.KEY_FILE: b"s3cr3t-key"}
    assert "s3cr3t-key" not in " ".join(rank.argv) and "s3cr3t-key" not in str(rank.env)


def test_replicas_run_one_per_node_and_a_replica_over_two_nodes_is_refused() -> None:
    dp2 = build_plan(profile(), "dp2")
    assert [r.node for r in dp2.ranks] == ["box1", "box2"]
    assert all(r.argv[:3] == ["/app/llama-server", "--model", GGUF] for r in dp2.ranks)
    with pytest.raises(
        ProfileError, match=r"modes\.pair: engine 'llamacpp' serves a replica on one node only"
    ) as e:
        build_plan(profile(), "pair")
    assert e.value.exit_code == ExitCode.USAGE and "replicas: 2" in (e.value.fix or "")


@pytest.mark.parametrize(
    ("flag", "source"),
    [
        ("model", "engine.options.gguf_file"),
        ("api-key-file", "engine.api_key"),
        ("hf-repo", "model.target.id"),
        ("rpc", "modes.<mode>.nodes"),
        ("alias", "engine.served_model_name"),
    ],
)
def test_the_flags_sparkctl_renders_are_refused_in_args(flag: str, source: str) -> None:
    with pytest.raises(ProfileError, match=rf"engine\.args\.{flag}: '{flag}' is set by sparkctl from"):
        build_plan(profile(args={flag: "x"}), "solo")
    assert source in F.MANAGED_FLAGS[flag]


def test_slots_stay_off_unless_the_profile_turns_them_on() -> None:
    argv = build_plan(profile(args={"slots": True}), "solo").ranks[0].argv
    assert "--slots" in argv and "--no-slots" not in argv
    bare = build_plan(profile(recipe_defaults=False), "solo").ranks[0].argv
    assert "--n-gpu-layers" not in bare and "--no-slots" in bare


def test_options_are_the_engines_own_and_checked_when_planned() -> None:
    with pytest.raises(ProfileError, match=r"engine\.options\.gguf_file: Field required") as e:
        build_plan(profile(options={}), "solo")
    assert "gguf_file" in (e.value.fix or "")
    with pytest.raises(ProfileError, match=r"engine\.options\.gguf_file: .*relative, no '\.\.'"):
        build_plan(profile(options={"gguf_file": "../x.gguf"}), "solo")
    with pytest.raises(ProfileError, match=r"engine\.options\.ctx: Extra inputs are not permitted"):
        build_plan(profile(options={"gguf_file": "a.gguf", "ctx": 1}), "solo")


def test_what_llama_cpp_lacks_is_refused_with_a_fix() -> None:
    with pytest.raises(ProfileError, match="admin_api_key: engine 'llamacpp' has no admin key"):
        build_plan(profile(admin_api_key={"env": "ADMIN"}), "solo")
    data = profile().model_dump(mode="json", exclude_none=True)
    data["model"]["target"]["revision"] = "main"
    with pytest.raises(ProfileError, match="needs the snapshot's commit, not 'main'") as e:
        build_plan(Profile.model_validate(data), "solo")
    assert "40-hex commit" in (e.value.fix or "")
    data["model"]["target"]["revision"] = COMMIT
    data["model"]["draft"] = {"id": "ggml-org/draft"}
    with pytest.raises(ProfileError, match="model.draft: sparkctl plans no draft model for llama.cpp"):
        build_plan(Profile.model_validate(data), "solo")
    assert launch_safety("llamacpp", "fit") is get_engine("llamacpp").launch  # flag names: test_check.py


def test_a_non_root_rank_opens_the_gguf_under_its_own_hf_home() -> None:
    argv = build_plan(profile(container={"user": "node"}), "solo").ranks[0].argv
    assert argv[2] == GGUF.replace("/root/.cache/huggingface", "/var/cache/sparkctl/huggingface")


def test_its_capabilities_are_the_ones_it_has() -> None:
    engine = get_engine("llamacpp")
    assert engine.auth is not None and engine.auth.key_format == "plain" and engine.auth.keys == ("api-key",)
    assert engine.memory is None and engine.multi_node is None and engine.layout_flags is None
    assert engine.launch is not None and engine.nccl_library_env is None
    assert engine.metrics is not None and engine.metrics.enable_flag == "metrics"
    assert engine.images is not None and "llama.cpp" in engine.images.markers
    assert engine.private_routes == ()  # --no-slots: nothing for a front to refuse
