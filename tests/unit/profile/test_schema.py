"""Bad profiles: one clear error each, with file, line and key path, before any connection."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sparkctl.errors import ProfileError
from sparkctl.profile import find_profile, load_profile_file, load_profile_text

ROOT = Path(__file__).resolve().parents[3]
DUAL = (ROOT / "profiles" / "dual-spark.yaml").read_text()


def error_for(text: str) -> ProfileError:
    """The load's error; several problems are one error each (`also`), joined here one per line."""
    with pytest.raises(ProfileError) as err:
        load_profile_text(text, "p.yaml")
    exc = err.value
    for other in exc.also:
        assert other.fix, f"an error without its own fix: {other.message}"
    exc.message = "\n".join([exc.message, *(o.message for o in exc.also)])
    return exc


def test_a_key_given_twice_is_an_error_naming_both_lines() -> None:
    text = DUAL.replace("  port: 8888\n", "  port: 8888\n  port: 9999\n", 1)
    assert text != DUAL
    err = error_for(text)
    first, second = line_of(text, "port: 8888"), line_of(text, "port: 9999")
    assert f"engine.port: given twice (lines {first} and {second})" in err.message
    assert f"delete line {first} or line {second}" in (err.fix or "")


def test_every_problem_is_its_own_error_with_its_own_fix() -> None:
    text = DUAL.replace("  port: 8888", "  port: -1").replace(
        "cluster: sparkduo", "cluster: sparkduo\nclustr: x"
    )
    err = error_for(text)
    assert err.fix and len(err.message.splitlines()) == 2, err.message


def test_a_tab_in_the_yaml_says_to_indent_with_spaces() -> None:
    err = error_for(DUAL.replace("  port: 8888", "\tport: 8888"))
    assert "invalid YAML" in err.message and err.fix == "indent with spaces, never tabs"


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize("path", sorted((ROOT / "profiles").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_profiles_are_valid(path: Path) -> None:
    assert load_profile_file(path).modes


def test_unknown_key_names_line_and_suggests() -> None:
    text = DUAL.replace("  mtu: 9000", "  mtuu: 9000")
    err = error_for(text)
    assert err.message.startswith(f"p.yaml:{line_of(text, 'mtuu')}: fabric.mtuu: unknown key 'mtuu'")
    assert err.fix == "did you mean 'mtu'?"


def test_unknown_key_in_a_list_item() -> None:
    text = DUAL.replace("    address: spark2.local", "    adress: spark2.local")
    err = error_for(text)
    assert f":{line_of(text, 'adress')}: nodes[1].adress: unknown key" in err.message
    assert err.fix == "did you mean 'address'?"


def test_wrong_type() -> None:
    text = DUAL.replace("gpus: 1", "gpus: one", 1)
    err = error_for(text)
    assert (
        f"p.yaml:{line_of(text, 'gpus: one')}: nodes[0].gpus: Input should be a valid integer" in err.message
    )


def test_duplicate_node_names() -> None:
    text = DUAL.replace("- name: spark2", "- name: spark1")
    err = error_for(text)
    assert "nodes[1].name: duplicate node name(s): spark1" in err.message
    assert err.message.startswith(f"p.yaml:{line_of(text, '- name: spark1') + 0}") or "p.yaml:" in err.message


def test_mode_naming_a_missing_node() -> None:
    text = DUAL.replace("nodes: [spark1, spark2]", "nodes: [spark1, spark3]")
    err = error_for(text)
    assert err.message == (
        f"p.yaml:{line_of(text, 'spark3')}: modes.tp2.nodes[1]: unknown node 'spark3' "
        "(did you mean 'spark2'?)"
    )


def test_tp_larger_than_the_gpus() -> None:
    text = DUAL.replace("    tp: 2", "    tp: 4")
    err = error_for(text)
    assert err.message == (
        f"p.yaml:{line_of(text, 'tp: 4')}: modes.tp2.tp: [gpus-per-node] node 'spark1' needs 2 GPU(s) "
        "for its groups but has 1 (fix: lower tp or replicas, or add nodes)"
    )


def test_port_out_of_range() -> None:
    text = DUAL.replace("  port: 8888", "  port: 88888")
    err = error_for(text)
    assert err.message.startswith(
        f"p.yaml:{line_of(text, '88888')}: engine.port: Input should be less than or equal to 65535"
    )


def test_managed_flag_and_plain_secret_are_rejected() -> None:
    text = DUAL.replace("    chunked-prefill-size: 8192", "    tp: 2").replace(
        "  served_model_name: qwen3.6-27b", "  served_model_name: qwen3.6-27b\n  env: {HF_TOKEN: hf_abc}"
    )
    err = error_for(text)
    assert "engine.env.HF_TOKEN: 'HF_TOKEN' looks like a secret" in err.message
    assert "hf_abc" not in str(err)


def test_multi_node_mode_needs_fabric() -> None:
    text = re.sub(r"(- name: spark2\n(?:.*\n)*?)    fabric:\n(?:      .*\n)+", r"\1", DUAL)
    err = error_for(text)
    assert "modes.tp2.nodes: replica 0 spans several nodes, so node 'spark2' needs a fabric" in err.message


def test_invalid_yaml_names_the_line() -> None:
    err = error_for("cluster: x\nnodes: [\n")
    assert err.message.startswith("p.yaml:3: invalid YAML")


def test_profile_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPARKCTL_PROFILE", raising=False)
    with pytest.raises(ProfileError, match="no cluster profile given"):
        find_profile(None)
    (tmp_path / "sparkctl.yaml").write_text("x")
    assert find_profile(None) == tmp_path / "sparkctl.yaml"
    other = tmp_path / "other.yaml"
    other.write_text("y")
    monkeypatch.setenv("SPARKCTL_PROFILE", str(other))
    assert find_profile(None) == other
    assert find_profile(tmp_path / "sparkctl.yaml") == tmp_path / "sparkctl.yaml"


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparkctl", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": "/home/spark",
            "COLUMNS": "200",
            **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},
        },
    )


@pytest.mark.parametrize(
    "change",
    [
        ("  mtu: 9000", "  mtuu: 9000"),
        ("gpus: 1", "gpus: one"),
        ("- name: spark2", "- name: spark1"),
        ("nodes: [spark1, spark2]", "nodes: [spark1, spark3]"),
        ("    tp: 2", "    tp: 4"),
        ("  port: 8888", "  port: 88888"),
    ],
)
def test_cli_bad_profile_exits_2_without_traceback(tmp_path: Path, change: tuple[str, str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(DUAL.replace(*change, 1))
    proc = run_cli("profile", "check", "-p", str(bad))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert re.search(rf"{re.escape(str(bad))}:\d+: ", proc.stderr)


def test_cli_plan_json_and_check() -> None:
    import json

    proc = run_cli("plan", "tp2", "-p", str(ROOT / "profiles" / "dual-spark.yaml"), "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert [r["node"] for r in plan["ranks"]] == ["spark1", "spark2"]
    proc = run_cli("profile", "check", "-p", str(ROOT / "profiles" / "two-gpu-box.yaml"))
    assert proc.returncode == 0 and "ok" in proc.stdout


def test_help_does_not_import_heavy_modules() -> None:
    code = (
        "import sys; from sparkctl.cli import app; "
        "heavy = [m for m in ('pydantic', 'paramiko', 'docker', 'torch', 'sglang', 'openai', 'yaml', "
        "'transformers', 'numpy', 'rich') if m in sys.modules]; print(','.join(heavy))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


def test_docs_profile_reference_is_generated_from_the_schema() -> None:
    from sparkctl.profile.reference import generated_section

    doc = (ROOT / "docs" / "profile.md").read_text()
    assert generated_section() in doc, (
        "regenerate: python -m sparkctl.profile.reference (see docs/profile.md)"
    )


def test_the_older_release_key_loads_as_the_engines_option_and_never_beside_a_different_one() -> None:
    """engine.<kind>_version (the spelling before engine.options) is options.version of its own
    engine; another engine's such key is ignored, as it always was; the two spellings may not differ."""
    new = load_profile_text(DUAL, "p.yaml")
    assert new.engine.options["version"] == "0.5.23" and "sglang_version" not in new.engine.model_dump()
    old = DUAL.replace('  options: {version: "0.5.23"}', '  sglang_version: "0.5.12"', 1)
    assert old != DUAL and load_profile_text(old, "p.yaml").engine.options == {"version": "0.5.12"}
    both = DUAL.replace(
        '  options: {version: "0.5.23"}', '  options: {version: "0.5.23"}\n  sglang_version: "0.5.12"', 1
    )
    assert "sglang_version and options.version differ" in error_for(both).message
    other = old.replace("engine:\n", "engine:\n  kind: vllm\n", 1)
    assert load_profile_text(other, "p.yaml").engine.options == {}
