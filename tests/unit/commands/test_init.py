"""`sparkctl init` on this machine alone (LocalConnector, real probes): questions, flags, overwrite rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sparkctl.cli import app
from sparkctl.profile import load_profile_file

COMMIT = "c" * 40


@pytest.fixture
def hf(tmp_path: Path) -> Path:
    """An HF cache with one model snapshot (refs/main -> COMMIT), as huggingface_hub lays it out."""
    repo = tmp_path / "hf" / "hub" / "models--org--tiny"
    (repo / "snapshots" / COMMIT).mkdir(parents=True)
    (repo / "snapshots" / COMMIT / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return tmp_path / "hf"


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(app, ["init", *args], input=input, env={"COLUMNS": "200"})


def test_interactive_asks_model_draft_image_with_discovered_defaults(tmp_path: Path, hf: Path) -> None:
    out = tmp_path / "p.yaml"
    res = run("--hf-cache", str(hf), "-o", str(out), input="\nnone\nmy/sglang:1\ny\n")
    assert res.exit_code == 0, res.output
    assert "Model (HF id[@revision]) [org/tiny]" in res.output  # discovered in the cache: the default
    prof = load_profile_file(out)
    assert prof.model.target.id == "org/tiny" and prof.model.target.revision == COMMIT
    assert prof.model.draft is None and prof.image.ref == "my/sglang:1"
    assert prof.model.hf_cache == str(hf) and [n.address for n in prof.nodes] == ["local"]
    assert list(prof.modes) == ["solo"] and prof.modes["solo"].default


def test_non_interactive_names_the_missing_flag(tmp_path: Path, hf: Path) -> None:
    out = tmp_path / "p.yaml"
    res = run("--non-interactive", "--hf-cache", str(hf), "--image", "x:1", "-o", str(out))
    assert res.exit_code == 2
    assert "--non-interactive needs --model ORG/NAME (discovered: org/tiny)" in res.output
    res = run("--non-interactive", "--model", "org/tiny", "-o", str(out))
    assert res.exit_code == 2 and "needs --image REF" in res.output
    assert not out.exists()


def test_existing_profile_is_diffed_not_overwritten_without_force(tmp_path: Path, hf: Path) -> None:
    out = tmp_path / "p.yaml"
    base = ["--non-interactive", "--hf-cache", str(hf), "--model", "org/tiny", "-o", str(out)]
    assert run(*base, "--image", "a:1").exit_code == 0
    first = out.read_text()
    again = run(*base, "--image", "a:1")
    assert again.exit_code == 0 and "already up to date" in again.output
    changed = run(*base, "--image", "b:2")
    assert changed.exit_code == 2
    assert "-  ref: a:1" in changed.output and "+  ref: b:2" in changed.output
    assert "exists; not overwritten" in changed.output and "--force" in changed.output
    assert out.read_text() == first
    assert run(*base, "--image", "b:2", "--force").exit_code == 0
    assert load_profile_file(out).image.ref == "b:2"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--peer", "a", "--node", "b"], "either --peer"),
        (["--peer", "a", "--peer", "a"], "node given twice: a"),
        (["--peer", "a:ssh"], "bad node address 'a:ssh'"),
        (["--cluster", "Bad Name", "--model", "o/m", "--image", "i"], "--cluster Bad Name"),
    ],
)
def test_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    res = run("--non-interactive", "-o", str(tmp_path / "p.yaml"), *args)
    assert res.exit_code == 2 and message in res.output


def test_without_a_terminal_init_names_non_interactive(tmp_path: Path, hf: Path) -> None:
    res = run("--hf-cache", str(hf), "-o", str(tmp_path / "p.yaml"), input="")
    assert res.exit_code == 2, res.output
    assert "Aborted" not in res.output and "--non-interactive" in res.output


def test_model_in_no_cache_suggests_a_download(tmp_path: Path, hf: Path) -> None:
    res = run(
        "--non-interactive",
        "--hf-cache",
        str(hf),
        "--model",
        "org/absent@abc",
        "--image",
        "x:1",
        "-o",
        str(tmp_path / "p.yaml"),
    )
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "org/absent is in no node's HF cache" in text and "hf download org/absent --revision abc" in text


# ----------------------------------------------------------------------------- --from-command
MODELS = Path(__file__).parents[2] / "fixtures" / "models"
# user B's exact command (profiles/two-gpu-box.yaml's header), run in SGLang's image
USER_B = (
    "python -m sglang.launch_server --model-path Qwen/Qwen3.6-27B-GPTQ-Int4 "
    "--speculative-draft-model-path z-lab/Qwen3.6-27B-DFlash --tp-size 2 --speculative-algorithm DFLASH "
    "--speculative-draft-attention-backend fa4 --mem-fraction-static 0.8"
)
RTX3090 = "NVIDIA GeForce RTX 3090,24,8.6"
NO_PARSER = {"SPARKCTL_SGLANG_PYTHON": "/nonexistent", "COLUMNS": "200"}  # no local parser run (seconds)


def hf_with(tmp_path: Path, *repos: tuple[str, str]) -> Path:
    """An HF cache whose snapshots are links to the header-only model fixtures."""
    for repo, fixture in repos:
        base = tmp_path / "hf" / "hub" / f"models--{repo.replace('/', '--')}"
        snap = base / "snapshots" / COMMIT
        snap.mkdir(parents=True)
        for f in (MODELS / fixture).iterdir():
            (snap / f.name).symlink_to(f)
        (base / "refs").mkdir()
        (base / "refs" / "main").write_text(COMMIT)
    return tmp_path / "hf"


def from_command(line: str, *args: str):
    argv = ["init", "--no-probe", "--from-command", line, *args]
    return CliRunner().invoke(app, argv, env=NO_PARSER)


def test_from_command_user_b_gets_a_profile_and_fit_explains_it(tmp_path: Path) -> None:
    hf = hf_with(
        tmp_path,
        ("Qwen/Qwen3.6-27B-GPTQ-Int4", "qwen3.6-27b-gptq-int4"),
        ("z-lab/Qwen3.6-27B-DFlash", "qwen3.6-27b-dflash"),
    )
    line = f"docker run --gpus all -v {hf}:/root/.cache/huggingface lmsysorg/sglang:v0.5.23 {USER_B}"
    out = tmp_path / "box.yaml"
    res = from_command(line, "--gpu", RTX3090, "-o", str(out))
    assert res.exit_code == 1, res.output  # fit found an error: the fa4 draft backend
    assert res.stdout == ""  # the profile went to the file, the verdict to stderr
    prof = load_profile_file(out)
    assert prof.engine.options == {"version": "0.5.23"} and list(prof.modes) == ["tp2"]
    assert prof.nodes[0].gpu is not None and prof.nodes[0].gpu.compute_capability == "8.6"
    text = " ".join(res.stderr.split())
    assert "error AttentionBackendArch: DFLASH draft backend: fa4 on NVIDIA GeForce RTX 3090 (sm86)" in text
    assert "fix: --speculative-draft-attention-backend flashinfer" in text
    assert "serves only 2 running request(s), fewer than 4" in text  # 0.8 under 0.5.23's sizing
    assert "gives up:" in text  # each memory fix says what it costs


def test_from_command_prints_yaml_that_plan_turns_back_into_the_line(tmp_path: Path) -> None:
    line = (
        "python3 -m sglang.launch_server --model-path Qwen/Qwen3.6-27B-NVFP4 --tp 2 --nnodes 2 --node-rank 0 "
        "--dist-init-addr 192.168.100.10:50051 --kv-cache-dtype fp8_e4m3 --mem-fraction-static 0.90 "
        "--context-length 262144 --enable-metrics --reasoning-parser qwen3 --host 0.0.0.0 --port 8888"
    )
    args = ("--peer", "spark@spark2.local", "--image", "lmsysorg/sglang:v0.5.23")
    res = from_command(f"NCCL_SOCKET_IFNAME=enp1s0f1np1 {line}", *args)
    assert res.exit_code == 0, res.output
    assert (
        "placeholder: nodes[1].fabric.ip" in res.stdout
        and "next: check or fill in nodes[1].fabric.ip" in res.stderr
    )
    path = tmp_path / "p.yaml"
    path.write_text(res.stdout)
    plan = CliRunner().invoke(app, ["plan", "-p", str(path), "--json"], env={"HOME": "/home/spark"})
    assert plan.exit_code == 0, plan.output
    data = json.loads(plan.stdout)
    assert data["mode"] == "tp2" and data["dist_init_addr"] == "192.168.100.10:50051"
    words = line.split()[3:]
    for rank in data["ranks"]:
        argv = rank["argv"]
        for flag, value in zip(words, [*words[1:], ""], strict=True):
            if flag.startswith("--") and flag not in ("--host", "--port", "--node-rank"):
                has_value = not value.startswith("--") and value != ""
                assert flag in argv and (not has_value or argv[argv.index(flag) + 1] == value), flag
        assert argv[argv.index("--node-rank") + 1] == str(rank["rank"])


def test_from_command_names_unknown_flags_and_never_overwrites(tmp_path: Path) -> None:
    out = tmp_path / "p.yaml"
    res = from_command(
        "vllm serve Qwen/Qwen3-14B-AWQ --max-model-length 4096", "-o", str(out), "--image", "v/v:1"
    )
    assert res.exit_code == 1, res.output
    text = " ".join(res.stderr.split())
    assert "error FromCommand: vLLM 0.32 has no flag --max-model-length: dropped" in text
    assert "fix: use --max-model-len" in text
    first = out.read_text()
    again = from_command(
        "vllm serve Qwen/Qwen3-14B-AWQ --max-model-len 4096", "-o", str(out), "--image", "v/v:1"
    )
    assert again.exit_code == 2 and "exists; not overwritten" in again.output and out.read_text() == first
    forced = from_command(
        "vllm serve Qwen/Qwen3-14B-AWQ --max-model-len 4096", "-o", str(out), "--image", "v/v:1", "--force"
    )
    assert forced.exit_code == 0, forced.output
    assert load_profile_file(out).engine.args == {"max-model-len": 4096}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from-command", "vllm serve a/b | tee log"], "'|' joins several commands"),
        (["--from-command", "./serve.sh --port 1"], "is not an engine's launch command"),
        (["--from-command", "vllm serve a/b", "--gpu", "RTX,lots"], "not NAME,GIB,CC[,unified]"),
        (["--from-command", "vllm serve a/b", "--model", "x/y"], "--model is init's discovery's"),
    ],
)
def test_from_command_usage_errors(args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["init", "--no-probe", *args], env=NO_PARSER)
    assert res.exit_code == 2 and message in " ".join(res.output.split()), res.output


def test_from_command_reads_this_machines_gpu_with_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real probe through a real shell, against an `nvidia-smi` replaying a GB10's capture."""
    import os
    import stat

    fx = MODELS.parent / "gpu" / "gb10"
    query = tmp_path / "query.csv"  # the probe's 9 fields, as a GB10 answers them
    query.write_text("0, NVIDIA GB10, GPU-1, 0000000F:01:00.0, [N/A], [N/A], [N/A], 580.95.05, 12.1\n")
    for where, answer in (("good", query), ("bad", fx / "query-gpu.csv")):  # bad: another query's fields
        (tmp_path / where).mkdir()
        fake = tmp_path / where / "nvidia-smi"
        fake.write_text(
            f'#!/bin/sh\nif [ "$1" = "-q" ]; then cat {fx}/nvidia-smi.txt; else cat {answer}; fi\n'
        )
        fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    path = os.environ["PATH"]
    line = "vllm serve Org/M --tensor-parallel-size 2"
    monkeypatch.setenv("PATH", f"{tmp_path / 'bad'}{os.pathsep}{path}")
    # no --image: a placeholder, so `fit` stays offline (no local Docker asked in a unit test)
    bad = CliRunner().invoke(app, ["init", "--from-command", line], env=NO_PARSER)
    assert bad.exit_code == 0 and "gpu:" not in bad.stdout, (
        bad.output
    )  # unreadable: no GPU facts, no traceback
    monkeypatch.setenv("PATH", f"{tmp_path / 'good'}{os.pathsep}{path}")
    argv = ["init", "--from-command", line, "--image", "v/v:1", "--no-probe", "-o", str(tmp_path / "n.yaml")]
    CliRunner().invoke(app, argv, env=NO_PARSER)
    assert load_profile_file(tmp_path / "n.yaml").nodes[0].gpu is None  # --no-probe asks nothing
    out = tmp_path / "p.yaml"
    res = CliRunner().invoke(app, ["init", "--from-command", line, "-o", str(out)], env=NO_PARSER)
    node = load_profile_file(out).nodes[0]
    assert node.gpu is not None and node.gpu.name == "NVIDIA GB10" and node.gpu.unified_memory
    assert node.gpu.compute_capability == "12.1" and node.gpu.memory_gib > 0
    text = " ".join(res.stderr.split())
    assert "this machine has 1 GPU(s); the line's layout needs 2 per node" in text
