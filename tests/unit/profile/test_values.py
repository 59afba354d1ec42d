"""profile/values.py: values accepted before issue 42 and refused now, each with its key, its
line and what a valid value looks like."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sparkctl.errors import ExitCode, ProfileError
from sparkctl.profile import load_profile_text

ROOT = Path(__file__).resolve().parents[3]


def shipped(name: str = "dual-spark") -> dict:
    return yaml.safe_load((ROOT / "profiles" / f"{name}.yaml").read_text())


def refused(data: dict, *words: str) -> ProfileError:
    with pytest.raises(ProfileError) as exc:
        load_profile_text(yaml.safe_dump(data, sort_keys=False), "p.yaml")
    err = exc.value
    text = f"{err.message} {err.fix}"
    assert err.exit_code == ExitCode.USAGE and err.message.startswith("p.yaml:"), text
    for word in words:
        assert word in text, (word, text)
    return err


def test_an_env_key_that_is_no_variable_name() -> None:
    data = shipped()
    data["engine"].setdefault("env", {})["BAD KEY=1"] = "x"
    refused(data, "engine.env", "BAD KEY=1", "not an environment variable name", "NCCL_DEBUG")


def test_a_line_break_in_served_model_name_or_an_args_value() -> None:
    data = shipped()
    data["engine"]["served_model_name"] = "qwen\n--api-key x"
    refused(data, "served_model_name", "line break")
    data = shipped()
    data["engine"]["args"]["chat-template"] = "a\nb"
    refused(data, "engine.args", "line break")


@pytest.mark.parametrize("key", ["revision=X", "model-path=X", "api-key=K"])
def test_an_args_key_holding_equals_is_no_flag_name(key: str) -> None:
    """argparse keeps the last value: `revision=X` bypassed the pinned revision (managed flags)."""
    data = shipped()
    data["engine"]["args"][key] = True
    refused(data, key, "not a flag name", "max-running-requests: 8")


def test_more_args_than_any_engine_has_flags_are_refused_before_planning() -> None:
    """60,000 args entries were accepted and took 36-40 s to plan (issue 42)."""
    data = shipped()
    data["engine"]["args"].update({f"x-flag-{i}": 1 for i in range(60_000)})
    refused(data, "engine.args", "60", "flags, more than any engine's parser has", "max-running-requests: 8")
    data = shipped()
    data["modes"]["tp2"]["args"] = {f"x-flag-{i}": 1 for i in range(1001)}
    refused(data, "modes.tp2.args", "1001 flags")
    data = shipped()
    data["engine"]["args"].update({f"x-flag-{i}": 1 for i in range(900)})  # many, not too many
    load_profile_text(yaml.safe_dump(data, sort_keys=False), "p.yaml")


def test_two_nodes_with_one_fabric_ip() -> None:
    data = shipped()
    data["nodes"][1]["fabric"]["ip"] = data["nodes"][0]["fabric"]["ip"]
    err = refused(data, "nodes[1].fabric.ip", "spark1")
    assert ":" in err.message.split(" ")[0]


@pytest.mark.parametrize("path", ["/tmp", "/", "/var/log/", "~"])
def test_a_log_dir_that_is_a_system_directory(path: str) -> None:
    """`up` runs chmod 700 on it on every node."""
    data = shipped()
    data["engine"]["log_dir"] = path
    refused(data, "engine.log_dir", "~/.local/state/sparkctl/logs")
