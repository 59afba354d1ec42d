"""Finding a profile's model on this machine, engine-neutral: what each engine reads of the
directory found is its own `load` (SGLang: its ModelFacts; vLLM: the directory itself)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkctl.engines.support.models import (
    ModelNotFound,
    find_model_dir,
    hf_snapshot_dir,
    lookup_models,
    require_models,
    safetensors_bytes,
)
from sparkctl.profile import load_profile_text


def _snapshot(root: Path, repo_id: str, commit: str = "5b0d4b5" + "a" * 33) -> Path:
    repo = root / "hub" / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({"num_hidden_layers": 2}))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return snap


def _profile(cache: Path, kind: str = "vllm") -> object:
    return load_profile_text(
        "cluster: c\nnodes:\n  - {name: spark1, address: local}\nimage: {ref: img:1}\n"
        f"model: {{hf_cache: {cache}, target: {{id: org/m}}}}\n"
        f"engine: {{kind: {kind}}}\nmodes: {{solo: {{nodes: [spark1], tp: 1}}}}\n"
    )


def test_snapshot_by_branch_ref_and_short_commit(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path, "z-lab/Qwen3.6-27B-DFlash")
    assert hf_snapshot_dir(tmp_path, "z-lab/Qwen3.6-27B-DFlash") == snap
    assert hf_snapshot_dir(tmp_path, "z-lab/Qwen3.6-27B-DFlash", "5b0d4b5") == snap  # short commit
    assert find_model_dir("z-lab/Qwen3.6-27B-DFlash", None, [tmp_path]) == snap
    assert find_model_dir("org/missing", None, [tmp_path]) is None


def test_a_plain_model_directory_is_found_too(tmp_path: Path) -> None:
    plain = tmp_path / "org--m"
    plain.mkdir()
    (plain / "config.json").write_text("{}")
    assert find_model_dir("org/m", None, [tmp_path]) == plain


def test_lookup_hands_the_directory_to_the_engines_loader(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path, "org/m")
    prof = _profile(tmp_path)
    assert lookup_models(prof).target == snap  # default: the directory itself
    seen: list[tuple[Path, str]] = []
    found = lookup_models(prof, load=lambda d, rid: seen.append((d, rid)) or "facts")
    assert found.target == "facts" and seen == [(snap, "org/m")]
    require_models(found, prof)  # nothing missing: no error


def test_a_missing_model_is_refused_with_where_it_looked(tmp_path: Path) -> None:
    prof = _profile(tmp_path / "empty")
    found = lookup_models(prof, target_dir=tmp_path / "nowhere")
    assert found.missing(prof) == ["target"]
    with pytest.raises(ModelNotFound) as exc:
        require_models(found, prof)
    assert str(tmp_path / "nowhere") in exc.value.message and "--allow-missing" in (exc.value.fix or "")


def test_safetensors_bytes_reads_the_headers_not_the_file_sizes() -> None:
    """The header-only fixtures weigh KB on disk; their headers say the checkpoint's real size."""
    fixtures = Path(__file__).parents[3] / "fixtures" / "models"
    awq = fixtures / "qwen3-14b-awq"
    assert sum(p.stat().st_size for p in awq.glob("*.safetensors")) < 1 << 20
    assert 9.9e9 < safetensors_bytes(awq) < 10.1e9  # Qwen3-14B-AWQ is ~10 GB on the hub
    assert 30e9 < safetensors_bytes(fixtures / "qwen3-30b-a3b-fp8") < 32e9


def test_safetensors_bytes_skips_a_broken_shard(tmp_path: Path) -> None:
    (tmp_path / "bad.safetensors").write_bytes(b"\x05")
    assert safetensors_bytes(tmp_path) == 0
