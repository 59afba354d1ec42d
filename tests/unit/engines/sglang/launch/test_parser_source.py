"""The parser program: a value argparse takes as any string is checked against the engine's own
registry of that value (a stand-in SGLang here, no torch); the table the offline rule keeps is the
installed SGLang's registry."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparkctl.engines.sglang.launch.parser_source import PARSER_CHECK_SOURCE, REGISTRY_FLAGS
from sparkctl.engines.sglang.launch.rules_attention import DRAFT_ATTENTION_BACKENDS

FAKE_SERVER_ARGS = """
class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--speculative-draft-attention-backend", type=str, default=None)
        parser.add_argument("--speculative-algorithm", type=str, default=None)
        parser.add_argument("--attention-backend", type=str, choices=["flashinfer", "triton"])
"""


FAKE_SPEC_INFO = """import enum
class SpeculativeAlgorithm(enum.Enum):
    DFLASH = 1
    EAGLE = 2
    NONE = 3
"""
FAKE_SPEC_REGISTRY = """_RESERVED_ALIASES = frozenset({"NEXTN"})
_REGISTRY = {"MYPLUGIN": object()}
"""


def _stand_in(root: Path, registry: list[str]) -> Path:
    pkg = root / "sglang"
    (pkg / "srt" / "arg_groups").mkdir(parents=True)
    (pkg / "srt" / "speculative").mkdir(parents=True)
    for init in (pkg, pkg / "srt", pkg / "srt" / "arg_groups", pkg / "srt" / "speculative"):
        (init / "__init__.py").write_text("")
    (pkg / "srt" / "server_args.py").write_text(FAKE_SERVER_ARGS)
    (pkg / "srt" / "arg_groups" / "choices.py").write_text(
        f"DRAFT_ATTENTION_BACKEND_CHOICES = {registry!r}\n"
    )
    (pkg / "srt" / "speculative" / "spec_info.py").write_text(FAKE_SPEC_INFO)
    (pkg / "srt" / "speculative" / "spec_registry.py").write_text(FAKE_SPEC_REGISTRY)
    return root


def _run(root: Path, *flags: str) -> dict:
    res = subprocess.run(
        [sys.executable, "-c", PARSER_CHECK_SOURCE, *flags],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_a_value_outside_the_engines_registry_is_an_error_argparse_would_not_raise(tmp_path: Path) -> None:
    root = _stand_in(tmp_path, ["flashinfer", "triton", "fa3"])
    out = _run(root, "--speculative-draft-attention-backend", "flashinfor", "--attention-backend", "triton")
    assert out["registries"]["--speculative-draft-attention-backend"] == ["fa3", "flashinfer", "triton"]
    assert out["errors"] == [
        {
            "kind": "choice",
            "flag": "--speculative-draft-attention-backend",
            "value": "flashinfor",
            "allowed": ["fa3", "flashinfer", "triton"],
            "registry": "DRAFT_ATTENTION_BACKEND_CHOICES",
        }
    ]
    assert "parser_error" not in out  # argparse itself accepts it: the miss this closes
    assert _run(root, "--speculative-draft-attention-backend=fa3")["errors"] == []


def test_a_speculative_algorithm_outside_the_engines_enum_aliases_and_plugins_is_an_error(
    tmp_path: Path,
) -> None:
    """argparse takes any string; SGLang's from_string upper-cases it and dies on the rest."""
    root = _stand_in(tmp_path, ["flashinfer"])
    out = _run(root, "--speculative-algorithm", "DFLAHS")
    allowed = ["DFLASH", "EAGLE", "MYPLUGIN", "NEXTN", "NONE"]
    assert out["registries"]["--speculative-algorithm"] == allowed
    assert out["errors"] == [
        {
            "kind": "choice",
            "flag": "--speculative-algorithm",
            "value": "DFLAHS",
            "allowed": allowed,
            "registry": "SpeculativeAlgorithm",
        }
    ]
    for ok in ("dflash", "DFLASH", "nextn", "myplugin"):
        assert _run(root, "--speculative-algorithm", ok)["errors"] == [], ok


def test_the_registry_is_read_from_the_install_so_a_newer_engine_widens_it(tmp_path: Path) -> None:
    root = _stand_in(tmp_path, ["flashinfer", "new_backend"])
    assert _run(root, "--speculative-draft-attention-backend", "new_backend")["errors"] == []


def _installed_registry(module: str, name: str) -> list[str] | None:
    spec = importlib.util.find_spec("sglang")  # the package only: nothing of it is imported
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0], *module.split(".")[1:]).with_suffix(".py")
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return list(ast.literal_eval(node.value))
    return None


def test_the_offline_table_is_the_installed_sglangs_registry() -> None:
    ((module, name),) = REGISTRY_FLAGS["--speculative-draft-attention-backend"]
    installed = _installed_registry(module, name)
    if installed is None:
        pytest.skip("SGLang is not installed here")
    assert sorted(DRAFT_ATTENTION_BACKENDS) == sorted(installed)
