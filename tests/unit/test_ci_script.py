"""`.ci/run` stays quiet: no pip resolver error from the deliberate `--no-deps` SGLang install."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_deps_sglang_is_the_last_pip_install() -> None:
    """pip reports a package's missing dependencies whenever a later install touches one of them
    (transformers, openai, ...); `--no-deps` installs skip that check. So SGLang goes in last."""
    lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    installs = [ln for ln in lines if ln.startswith("python3 -m pip install")]
    assert installs and "--no-deps sglang==" in installs[-1], installs
    assert sum("sglang" in ln for ln in installs) == 1
