"""docs/engines.md's first vLLM profile, copied as printed with only the model and image changed,
passes `profile check` and `plan --check` (issue 46: a profile written from the docs serves)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]


def docs_example() -> dict:
    """The YAML block under docs/engines.md's "### A first profile"."""
    text = (ROOT / "docs" / "engines.md").read_text()
    section = text.split("### A first profile", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None, "docs/engines.md: no yaml block under '### A first profile'"
    return yaml.safe_load(block.group(1))


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPARKCTL_API_KEY": "k-docs-example"}
    return subprocess.run(
        [sys.executable, "-m", "sparkctl", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_the_docs_vllm_example_checks_and_plans(tmp_path: Path) -> None:
    doc = docs_example()
    assert doc["engine"]["kind"] == "vllm" and "command" not in doc["engine"]
    doc["model"]["target"] = {"id": "acme/tiny-chat", "revision": "0123456789abcdef0123456789abcdef01234567"}
    doc["image"]["ref"] = "registry.example/acme/vllm-openai:v0.32.0"
    path = tmp_path / "sparkctl.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    check = run("profile", "check", "-p", str(path))
    assert check.returncode == 0, check.stdout + check.stderr
    for mode in doc["modes"]:
        plan = run("plan", mode, "--check", "-p", str(path))
        assert plan.returncode == 0, plan.stdout + plan.stderr
        assert "vllm serve acme/tiny-chat" in " ".join(plan.stdout.split()), plan.stdout
