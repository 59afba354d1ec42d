"""User B of issue 42, end to end: the exact launch line that died with "Not enough memory" on both
ranks of a 2x RTX 3090 box, turned into a profile by `init --from-command`, then explained by `fit`.

The line ran in an SGLang release of the 0.5.12 sizing (<= 0.5.12 reserves the speculative mamba
scratch for every running request): there `fit` predicts the very error, says in one sentence what
broke the budget, and each change of its fix says what it gives up. Under 0.5.23's sizing the
same line starts but serves fewer requests than it asks for (tests/unit/commands/test_init.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sparkctl.cli import app
from sparkctl.profile import load_profile_file

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "models"
COMMIT = "0" * 40
USER_B = (
    "python -m sglang.launch_server --model-path Qwen/Qwen3.6-27B-GPTQ-Int4 "
    "--speculative-draft-model-path z-lab/Qwen3.6-27B-DFlash --tp-size 2 --speculative-algorithm DFLASH "
    "--speculative-draft-attention-backend fa4 --mem-fraction-static 0.8"
)


def _hf(tmp: Path) -> Path:
    """An HF cache whose snapshots are links to the header-only fixtures of both models."""
    for repo, fixture in (
        ("Qwen/Qwen3.6-27B-GPTQ-Int4", "qwen3.6-27b-gptq-int4"),
        ("z-lab/Qwen3.6-27B-DFlash", "qwen3.6-27b-dflash"),
    ):
        base = tmp / "hf" / "hub" / f"models--{repo.replace('/', '--')}"
        (base / "snapshots" / COMMIT).mkdir(parents=True)
        for f in (FIXTURES / fixture).iterdir():
            (base / "snapshots" / COMMIT / f.name).symlink_to(f)
        (base / "refs").mkdir()
        (base / "refs" / "main").write_text(COMMIT)
    return tmp / "hf"


@pytest.mark.parametrize("tag", ["v0.5.10", "v0.5.12"])
def test_user_b_s_line_in_their_release_is_the_not_enough_memory_error_explained(
    tmp_path: Path, tag: str
) -> None:
    line = f"docker run --gpus all -v {_hf(tmp_path)}:/root/.cache/huggingface lmsysorg/sglang:{tag} {USER_B}"
    out = tmp_path / "box.yaml"
    argv = [
        "init",
        "--no-probe",
        "--from-command",
        line,
        "--gpu",
        "NVIDIA GeForce RTX 3090,24,8.6",
        "-o",
        str(out),
    ]
    env = {"SPARKCTL_SGLANG_PYTHON": "/nonexistent", "COLUMNS": "200", "HOME": str(tmp_path)}
    res = CliRunner().invoke(app, argv, env=env)
    assert res.exit_code == 1, res.output  # fit found errors: written, then refused
    prof = load_profile_file(out)
    assert list(prof.modes) == ["tp2"] and prof.engine.args["mem-fraction-static"] in (0.8, "0.8")
    text = " ".join(res.stderr.split())
    assert "error AttentionBackendArch: DFLASH draft backend: fa4 on NVIDIA GeForce RTX 3090 (sm86)" in text
    assert "error MemoryFit:" in text and "this launch would die with: Not enough memory" in text
    why = text[text.index("Why: ") :].split(" fix: ")[0]
    assert "--speculative-num-draft-tokens 16" in why and "= 55.05 GiB of speculative mamba scratch" in why
    assert "against the 9.20 GiB left after the weights" in why and "--mem-fraction-static 0.8" in why
    fix = text[text.index("fix: --mem-fraction-static") :].split("proposed flags:")[0]
    assert "gives up:" in fix and "16 -> 2 draft tokens" in fix and "of the speculative speed-up lost" in fix
    assert "FP8 KV cache" in fix and "accuracy" in fix  # each change, its cost in words
    assert "proposed flags: --speculative-draft-attention-backend flashinfer" in text
