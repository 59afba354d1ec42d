"""planning/managed.py: what sparkctl sets itself is refused in the profile's args and env."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sparkctl.errors import ProfileError
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_text

ROOT = Path(__file__).resolve().parents[3]


def shipped(name: str = "dual-spark") -> dict:
    return yaml.safe_load((ROOT / "profiles" / f"{name}.yaml").read_text())


def test_engine_env_may_not_replace_what_sparkctl_sets() -> None:
    """`HF_HUB_OFFLINE: "0"` voided `offline: true`; HF_HOME would move the cache mount."""
    for key, value in (("HF_HUB_OFFLINE", "0"), ("HF_HOME", "/")):
        data = shipped()
        data["engine"].setdefault("env", {})[key] = value
        prof = load_profile_text(yaml.safe_dump(data), "p.yaml")
        with pytest.raises(ProfileError, match=f"engine.env.{key}: sparkctl sets {key}"):
            build_plan(prof, "tp2")
    data = shipped()
    data["engine"].setdefault("env", {})["NCCL_DEBUG"] = "INFO"  # tuning stays the user's
    build_plan(load_profile_text(yaml.safe_dump(data), "p.yaml"), "tp2")
