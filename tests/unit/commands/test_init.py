"""`sparkctl init` on this machine alone (LocalConnector, real probes): questions, flags, overwrite rules."""

from __future__ import annotations

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
