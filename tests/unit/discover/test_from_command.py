"""`init --from-command`'s flow: a launch line -> a profile that loads and whose plan gives the
line's flags back, with the nodes the line implies, its env and mounts placed, and a note for
everything not taken."""

from __future__ import annotations

import shlex

import pytest

from sparkctl.discover.from_command import FromCommandRequest, from_command
from sparkctl.errors import UsageError
from sparkctl.planning.build import build_plan

LOCAL = [("local", None, None)]
# The reference recipe's TP=2 launch on rank 0 (tests/unit/planning/test_build.py RECIPE_FLAGS)
RECIPE_TP2 = (
    "docker run --gpus all --network host --shm-size 32g -e NCCL_SOCKET_IFNAME=enp1s0f1np1 "
    "-e NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1 -e HF_TOKEN=hf_x -v /home/spark/.cache/huggingface:/root/.cache/huggingface "
    "sglang-dflash:spark python3 -m sglang.launch_server --model-path Qwen/Qwen3.6-27B-NVFP4 --revision main "
    "--served-model-name qwen3.6-27b --speculative-algorithm DFLASH "
    "--speculative-draft-model-path z-lab/Qwen3.6-27B-DFlash --speculative-draft-model-revision 5b0d4b5 "
    "--attention-backend flashinfer --chunked-prefill-size 8192 --disable-prefill-cuda-graph "
    "--kv-cache-dtype fp8_e4m3 --mamba-ssm-dtype bfloat16 --mamba-full-memory-ratio 4.21 "
    "--mamba-radix-cache-strategy extra_buffer --max-mamba-cache-size 80 --max-running-requests 16 "
    "--context-length 262144 --speculative-num-draft-tokens 8 --reasoning-parser qwen3 "
    "--tool-call-parser qwen3_coder --sampling-defaults model --enable-metrics --enable-cache-report "
    "--stream-interval 1 --sleep-on-idle --mem-fraction-static 0.90 --api-key sk-local "
    "--tp 2 --nnodes 2 --node-rank 0 --dist-init-addr 192.168.100.10:50051 --host 0.0.0.0 --port 8888"
)
LAYOUT = {"--tp", "--nnodes", "--node-rank", "--dist-init-addr", "--host", "--port", "--api-key", "--config"}


def flags(argv: list[str], start: int) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    i = start
    while i < len(argv):
        value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None
        out[argv[i]] = value
        i += 1 if value is None else 2
    return out


@pytest.fixture(autouse=True)
def home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/spark")


def test_recipe_tp2_line_plans_back_into_the_same_flags_on_both_ranks() -> None:
    res = from_command(FromCommandRequest(RECIPE_TP2, [*LOCAL, ("spark2.local", "spark", None)]))
    p = res.profile
    assert res.mode == "tp2" and not res.unknown_nodes
    assert [n.address for n in p.nodes] == ["local", "spark2.local"] and p.nodes[1].user == "spark"
    assert [str(n.fabric.ip) for n in p.nodes] == ["192.168.100.10", "192.168.100.11"]
    assert p.nodes[0].fabric.netdevs == ["enp1s0f1np1"] and p.nodes[0].fabric.hcas == [
        "rocep1s0f1",
        "roceP2p1s0f1",
    ]
    assert p.fabric.dist_init_port == 50051 and p.image.ref == "sglang-dflash:spark"
    assert "version" not in p.engine.options  # the tag names no release
    assert p.engine.api_key is not None and p.engine.api_key.env == "SPARKCTL_API_KEY"
    assert (
        p.engine.secrets["HF_TOKEN"].env == "HF_TOKEN"
        and "hf_x" not in res.text
        and "sk-local" not in res.text
    )
    assert p.model.hf_cache == "/home/spark/.cache/huggingface" and p.engine.container.shm_size == "32g"
    assert res.placeholders == ["nodes[1].fabric.ip (assumed rank 0's + 1)"]
    line = shlex.split(RECIPE_TP2)
    want = flags(line, line.index("sglang.launch_server") + 1)
    plan = build_plan(p, "tp2")
    for rank in (0, 1):
        got = flags(plan.rank(rank).argv, 3)
        assert {k: v for k, v in got.items() if k not in LAYOUT} == {
            k: v for k, v in want.items() if k not in LAYOUT
        }
        assert (got["--tp"], got["--nnodes"], got["--node-rank"]) == ("2", "2", str(rank))
        assert got["--dist-init-addr"] == "192.168.100.10:50051" and got["--config"]
    gateway = plan.rank(0).gateway
    assert gateway is not None and (gateway.listen, gateway.port) == ("0.0.0.0", 8888)


def test_a_rank_nobody_named_is_a_placeholder_and_blocks_fit() -> None:
    res = from_command(FromCommandRequest(RECIPE_TP2, LOCAL))
    assert res.unknown_nodes and res.profile.nodes[1].address == "node2.invalid"
    assert res.placeholders[0] == "nodes[1].address (rank 1 of the line's 2 nodes)"
    assert "# placeholder: nodes[1].address" in res.text


def test_rank1_line_puts_this_machine_at_its_rank() -> None:
    line = (
        "vllm serve a/b -tp 2 --nnodes 2 --node-rank 1 --master-addr 10.0.0.5 --master-port 29500 --headless"
    )
    res = from_command(FromCommandRequest(line, LOCAL, image="vllm/vllm-openai:v0.32.0"))
    assert [n.address for n in res.profile.nodes] == ["node1.invalid", "local"]
    assert res.profile.engine.kind == "vllm" and res.profile.fabric.dist_init_port == 29500
    assert str(res.profile.nodes[0].fabric.ip) == "10.0.0.5"


def test_image_entrypoint_line_env_and_gpu() -> None:
    line = (
        "docker run --runtime nvidia -e OMP_NUM_THREADS=8 -e CUDA_VISIBLE_DEVICES=0,1 vllm/vllm-openai:v0.32.0 "
        "--model Qwen/Qwen3-14B-AWQ --tensor-parallel-size 2 --gpu-memory-utilization 0.85"
    )
    gpu = {"name": "NVIDIA GeForce RTX 3090", "memory_gib": 24.0, "compute_capability": "8.6"}
    res = from_command(FromCommandRequest(line, LOCAL, gpu=gpu, local_gpus=2))
    p = res.profile
    assert p.engine.kind == "vllm" and p.image.ref == "vllm/vllm-openai:v0.32.0"
    assert p.engine.env == {"OMP_NUM_THREADS": "8"} and p.nodes[0].gpus == 2
    assert p.nodes[0].gpu is not None and p.nodes[0].gpu.compute_capability == "8.6"
    assert {f.message.split(":")[0] for f in res.findings} >= {"CUDA_VISIBLE_DEVICES=0,1", "docker --runtime"}
    argv = build_plan(p, "tp2").rank(0).argv
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.85" and "--enforce-eager" not in argv


def test_hf_cache_snapshot_path_is_the_model_id_a_local_dir_a_placeholder() -> None:
    line = "python -m sglang.launch_server --model-path /data/hf/hub/models--Qwen--Qwen3-8B/snapshots/abc123"
    p = from_command(FromCommandRequest(line, LOCAL)).profile
    assert (p.model.target.id, p.model.target.revision, p.model.hf_cache) == (
        "Qwen/Qwen3-8B",
        "abc123",
        "/data/hf",
    )
    res = from_command(FromCommandRequest("sglang serve --model-path /models/mine", LOCAL))
    assert res.profile.model.target.id == "your-org/your-model"
    assert any("is a path, not a Hugging Face id" in f.message for f in res.findings)
    assert "model.target.id" in res.placeholders and "image.ref" in res.placeholders[0]


def test_env_sparkctl_renders_is_dropped_with_a_note() -> None:
    line = (
        "docker run -e SGLANG_HOST_IP=10.0.0.9 x/sglang:v0.5.23 "
        + RECIPE_TP2.split("sglang-dflash:spark ")[1]
    )
    res = from_command(FromCommandRequest(line, [*LOCAL, ("spark2", None, None)]))
    assert "SGLANG_HOST_IP" not in res.profile.engine.env
    assert any(f.message.startswith("SGLANG_HOST_IP") for f in res.findings)
    assert res.profile.engine.options == {"version": "0.5.23"}


def test_not_a_launch_line() -> None:
    with pytest.raises(UsageError, match="is not an engine's launch command") as exc:
        from_command(FromCommandRequest("python serve.py --port 1", LOCAL))
    assert "python3 -m sglang.launch_server" in (exc.value.fix or "") and "vllm serve" in (
        exc.value.fix or ""
    )


def test_an_engine_without_a_reader_is_neither_read_nor_offered() -> None:
    """llama.cpp has no from_command.py: its line is no engine's, and the fix offers only readers."""
    line = "docker run ghcr.io/ggml-org/llama.cpp:server -m /m/x.gguf --port 8080"
    with pytest.raises(UsageError, match="is not an engine's launch command") as exc:
        from_command(FromCommandRequest(line, LOCAL))
    assert "llama-server" not in (exc.value.fix or "")
    with pytest.raises(UsageError, match="is not an engine's launch command"):
        from_command(FromCommandRequest("llama-server -m /m/x.gguf --port 8080", LOCAL))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("vllm serve a/b --nnodes 2", "modes.solo.tp: [nodes-divide-tp-pp]"),
        ("vllm serve a/b --port 99999", "engine.port: Input should be less than or equal to 65535"),
    ],
)
def test_a_line_whose_profile_is_refused_names_the_key_not_a_line_of_yaml(line: str, message: str) -> None:
    with pytest.raises(UsageError) as exc:
        from_command(FromCommandRequest(line, LOCAL))
    assert exc.value.message.startswith("--from-command: the line's profile is refused: " + message)
    assert "<from-command>" not in exc.value.message and exc.value.fix


def test_image_entrypoint_takes_a_positional_model_but_not_a_program() -> None:
    res = from_command(FromCommandRequest("docker run vllm/vllm-openai:v0.32.0 Org/M -tp 2", LOCAL))
    assert res.profile.engine.kind == "vllm" and res.profile.model.target.id == "Org/M" and res.mode == "tp2"
    with pytest.raises(UsageError, match="'bash' is not an engine's launch command"):
        from_command(FromCommandRequest("docker run vllm/vllm-openai:v0.32.0 bash", LOCAL))


def test_a_one_node_line_with_a_peer_keeps_its_layout_on_this_machine() -> None:
    res = from_command(FromCommandRequest("vllm serve Org/M -tp 2", [*LOCAL, ("box2", None, None)]))
    p = res.profile
    assert [n.address for n in p.nodes] == ["local", "box2"] and p.modes["tp2"].nodes == [p.nodes[0].name]
    assert p.nodes[0].gpus == 2 and p.nodes[0].fabric is None


def test_any_line_is_a_profile_or_one_sparkctl_error_never_a_traceback() -> None:
    """Seeded random lines from a corpus of the words that meet in launch lines (flags sparkctl
    owns with bad values, docker options, shell-ish words, JSON)."""
    import random

    from sparkctl.errors import SparkctlError

    corpus = shlex.split(
        "vllm serve python -m sglang.launch_server docker run -e A=1 -v /a:/b --tp 2 --nnodes 3 "
        "--node-rank 5 --dist-init-addr 1.2.3.4:5 host:x --model-path a/b --model /x/y -tp --port 0 "
        "--host '' --speculative-config {} '{\"model\":1}' --master-addr ::1 --headless x/y:1 bash -c "
        "--pp-size 4 = --= - -- --api-key HF_TOKEN=x --served-model-name a b -q awq --config nan -1e5 "
        "sudo exec env 'a b'"
    )
    rng = random.Random(42)
    for _ in range(300):
        words = [rng.choice(corpus) for _ in range(rng.randint(1, 14))]
        launcher = rng.choice([[], ["vllm", "serve"], ["python", "-m", "sglang.launch_server"]])
        line = shlex.join([*launcher, *words])
        try:
            res = from_command(FromCommandRequest(line, LOCAL))
        except SparkctlError as exc:
            assert exc.message and "\n" not in exc.message, line
        else:
            assert res.profile.modes[res.mode].default, line
