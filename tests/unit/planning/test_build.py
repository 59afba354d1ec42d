"""The pure plan: golden files plus the reference recipe's flags and env, rank by rank."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sparkctl.engines.base import render_args
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file, load_profile_text
from sparkctl.secrets import SecretRef

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "golden"

# The reference recipe's launch (recipe.md, "Solo"), flag by flag, for the 27B hybrid model.
RECIPE_FLAGS = {
    "--attention-backend": "flashinfer",
    "--chunked-prefill-size": "8192",
    "--disable-prefill-cuda-graph": None,
    "--kv-cache-dtype": "fp8_e4m3",
    "--mamba-ssm-dtype": "bfloat16",
    "--mamba-full-memory-ratio": "4.21",
    "--mamba-radix-cache-strategy": "extra_buffer",
    # the recipe says 64, which serves only 12 of its 16 requests (5 mamba slots per request under
    # extra_buffer, `fit`): the shipped profiles say 80 = 16 x 5, the one deliberate difference
    "--max-mamba-cache-size": "80",
    "--max-running-requests": "16",
    "--context-length": "262144",
    "--speculative-algorithm": "DFLASH",
    "--speculative-draft-model-path": "z-lab/Qwen3.6-27B-DFlash",
    "--speculative-draft-model-revision": "5b0d4b5",
    "--speculative-num-draft-tokens": "8",
    "--reasoning-parser": "qwen3",
    "--tool-call-parser": "qwen3_coder",
    "--sampling-defaults": "model",
    "--enable-metrics": None,
    "--enable-cache-report": None,
    "--stream-interval": "1",
    "--sleep-on-idle": None,
    "--mem-fraction-static": "0.9",
    "--host": "0.0.0.0",
    "--port": "8888",
    "--config": "/run/secrets/sparkctl-sglang.yaml",
    "--model-path": "Qwen/Qwen3.6-27B-NVFP4",
    "--served-model-name": "qwen3.6-27b",
}


def flags(argv: list[str]) -> dict[str, str | None]:
    """argv after the command -> {flag: value or None}; fails on a repeated flag."""
    out: dict[str, str | None] = {}
    i = 3  # python3 -m sglang.launch_server
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    while i < len(argv):
        flag = argv[i]
        assert flag.startswith("--") and flag not in out, flag
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[flag] = argv[i + 1]
            i += 2
        else:
            out[flag] = None
            i += 1
    return out


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("HOME", "/home/spark")
    return "/home/spark"


def load(name: str):
    return load_profile_file(ROOT / "profiles" / name)


def test_dual_spark_tp2_matches_the_recipe_rank_by_rank(home: str) -> None:
    plan = build_plan(load("dual-spark.yaml"), "tp2")
    assert plan.nnodes == 2 and [r.node for r in plan.ranks] == ["spark1", "spark2"]
    assert plan.dist_init_addr == "192.168.100.10:50051"
    for rank, ip in ((0, "192.168.100.10"), (1, "192.168.100.11")):
        spec = plan.rank(rank)
        got = flags(spec.argv)
        expected = {
            **RECIPE_FLAGS,
            "--revision": "main",
            "--tp": "2",
            "--nnodes": "2",
            "--node-rank": str(rank),
            "--dist-init-addr": "192.168.100.10:50051",
        }
        if rank == 0:  # the engine behind its gateway, which takes the recipe's 0.0.0.0:8888
            expected |= {"--host": "127.0.0.1", "--port": "18888"}
            g = spec.gateway
            assert (g.node, g.listen, g.port, g.upstream_host, g.upstream_port) == (
                spec.node, "0.0.0.0", 8888, "127.0.0.1", 18888,
            )  # fmt: skip
            assert ("GET", "/v1/models") in g.routes and not any("server_info" in t for _, t in g.routes)
        else:
            assert spec.gateway is None
        assert "--trust-remote-code" not in got and "--api-key" not in got  # opt-in; key only in the file
        assert got == expected
        env = spec.env_masked()
        assert {
            k: env[k]
            for k in (
                "NCCL_IB_HCA",
                "NCCL_SOCKET_IFNAME",
                "GLOO_SOCKET_IFNAME",
                "NCCL_CUMEM_ENABLE",
                "NCCL_NVLS_ENABLE",
                "SGLANG_HOST_IP",
                "HF_HOME",
                "TRITON_CACHE_DIR",
            )
        } == {
            "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1",
            "NCCL_SOCKET_IFNAME": "enp1s0f1np1",
            "GLOO_SOCKET_IFNAME": "enp1s0f1np1",
            "NCCL_CUMEM_ENABLE": "0",
            "NCCL_NVLS_ENABLE": "0",
            "SGLANG_HOST_IP": ip,
            "HF_HOME": "/root/.cache/huggingface",
            "TRITON_CACHE_DIR": "/root/.triton",
        }
        assert "NCCL_IB_DISABLE" not in env
        # Every secret is a file: the env holds only its path, never a value or a SecretRef.
        assert "HF_TOKEN" not in env and env["HF_TOKEN_PATH"] == "/run/secrets/HF_TOKEN"
        assert env["HF_HUB_OFFLINE"] == "1"
        files = {(f.target, f.yaml_key): f.ref for f in spec.secrets}
        assert files[("/run/secrets/HF_TOKEN", None)] == SecretRef("HF_TOKEN", env="HF_TOKEN")
        assert files[("/run/secrets/sparkctl-sglang.yaml", "api-key")].env == "SPARKCTL_API_KEY"
        opts = spec.options
        assert opts.network_mode == "host" and opts.ipc_mode == "private" and opts.shm_size == "32g"
        assert not opts.privileged and opts.gpus == "all" and opts.rdma_devices_dir == "/dev/infiniband"
        # The node user (spark) owns the caches: root in the container needs DAC_OVERRIDE to write them.
        assert opts.cap_add == ["IPC_LOCK", "DAC_OVERRIDE"] and opts.ulimits == {"memlock": -1}
        assert spec.labels["sparkctl.rank"] == str(rank) and spec.labels["sparkctl.mode"] == "tp2"
        assert spec.labels["sparkctl.config_hash"] == plan.config_hash
    assert plan.endpoint.url == "http://127.0.0.1:8888"
    assert [(c.node, c.name) for c in plan.stop_first] == [
        ("spark1", "sparkctl-sparkduo-solo-r0"),
        ("spark1", "sparkctl-sparkduo-dp2-g0-r0"),
        ("spark2", "sparkctl-sparkduo-dp2-g1-r0"),
    ]


def test_dual_spark_solo_is_the_recipe_without_fabric(home: str) -> None:
    plan = build_plan(load("dual-spark.yaml"), "solo")
    (spec,) = plan.ranks
    behind_front = {"--host": "127.0.0.1", "--port": "18888"}
    assert flags(spec.argv) == {**RECIPE_FLAGS, "--revision": "main", "--tp": "1", **behind_front}
    assert set(spec.env_masked()) == {"HF_HOME", "TRITON_CACHE_DIR", "HF_TOKEN_PATH", "HF_HUB_OFFLINE"}
    # Only the hub cache is mounted: $HF_HOME/token (the node's login token) stays outside.
    assert (spec.mounts[0].source, spec.mounts[0].target) == (
        "/home/spark/.cache/huggingface/hub",
        "/root/.cache/huggingface/hub",
    )
    # Solo modes never get the RDMA devices or capabilities.
    assert spec.options.rdma_devices_dir is None and spec.options.ulimits == {}
    assert spec.options.cap_add == ["DAC_OVERRIDE"] and spec.options.cap_drop == ["ALL"]
    assert {c.name for c in plan.stop_first} == {
        "sparkctl-sparkduo-tp2-r0",
        "sparkctl-sparkduo-tp2-r1",
        "sparkctl-sparkduo-dp2-g0-r0",
        "sparkctl-sparkduo-dp2-g1-r0",
    }


def test_two_gpu_box_is_one_rank_with_two_gpus(home: str) -> None:
    plan = build_plan(load("two-gpu-box.yaml"), "tp2")
    (spec,) = plan.ranks
    got = flags(spec.argv)
    assert got["--tp"] == "2" and "--nnodes" not in got and "--dist-init-addr" not in got
    assert spec.options.gpus == "all" and spec.gpus == 2
    assert spec.env_masked()["NCCL_CUMEM_ENABLE"] == "0" and "NCCL_SOCKET_IFNAME" not in spec.env
    solo = build_plan(load("two-gpu-box.yaml"), "solo").ranks[0]
    assert solo.options.gpus == "0" and solo.gpus == 1


@pytest.mark.parametrize(
    ("profile", "mode"),
    [
        ("dual-spark.yaml", "tp2"),
        ("dual-spark.yaml", "solo"),
        ("solo-spark.yaml", "solo"),
        ("two-gpu-box.yaml", "tp2"),
        ("two-gpu-box.yaml", "solo"),
        ("two-gpu-box.yaml", "dp2"),
        ("dual-spark.yaml", "dp2"),
        ("quad-spark.yaml", "tp4"),
        ("quad-spark.yaml", "tp2x2"),
        ("quad-spark.yaml", "dp4"),
    ],
)
def test_plan_golden(home: str, profile: str, mode: str) -> None:
    got = build_plan(load(profile), mode).to_json()
    path = GOLDEN / f"{profile.removesuffix('.yaml')}-{mode}.json"
    if os.environ.get("SPARKCTL_UPDATE_GOLDEN"):
        path.write_text(json.dumps(got, indent=2) + "\n")
    assert got == json.loads(path.read_text()), (
        "plan changed; review and regenerate with SPARKCTL_UPDATE_GOLDEN=1"
    )


def test_secret_values_never_reach_the_plan(home: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_supersecretvalue")
    plan = build_plan(load("dual-spark.yaml"), "tp2")
    text = json.dumps(plan.to_json()) + repr(plan) + str(plan)
    assert "hf_supersecretvalue" not in text
    from sparkctl.secrets import resolve

    assert resolve(plan.rank(0).secret_refs()[0]) == "hf_supersecretvalue"


def test_config_hash_changes_with_what_reaches_the_container(home: str) -> None:
    text = (ROOT / "profiles" / "dual-spark.yaml").read_text()
    a = build_plan(load_profile_text(text), "tp2")
    b = build_plan(
        load_profile_text(text.replace("max-running-requests: 16", "max-running-requests: 8")), "tp2"
    )
    c = build_plan(load_profile_text(text), "tp2")
    assert a.config_hash == c.config_hash != b.config_hash


def test_render_args_forms() -> None:
    assert render_args({"a": True, "b": False, "c": None, "d": 3, "e": [1, "x"], "f": 0.9}) == [
        "--a",
        "--d",
        "3",
        "--e",
        "1",
        "x",
        "--f",
        "0.9",
    ]


def test_mode_args_override_and_can_unset_defaults(home: str) -> None:
    text = (
        (ROOT / "profiles" / "dual-spark.yaml")
        .read_text()
        .replace(
            "    nodes: [spark1]\n    tp: 1\n",
            "    nodes: [spark1]\n    tp: 1\n    args: {sleep-on-idle: false, max-running-requests: 4}\n",
        )
    )
    got = flags(build_plan(load_profile_text(text), "solo").ranks[0].argv)
    assert "--sleep-on-idle" not in got and got["--max-running-requests"] == "4"


def test_unknown_mode_suggests_the_nearest(home: str) -> None:
    from sparkctl.errors import UsageError

    with pytest.raises(UsageError) as err:
        build_plan(load("dual-spark.yaml"), "tp3")
    assert "tp2" in str(err.value)


def test_human_bytes() -> None:
    from sparkctl.units import human_bytes

    assert [human_bytes(n) for n in (0, 1023, 1536, 20 * 2**30, 5 * 2**40)] == [
        "0 B",
        "1023 B",
        "1.5 KiB",
        "20.0 GiB",
        "5120.0 GiB",
    ]
