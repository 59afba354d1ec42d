"""The capability records: absent by default, options checked by the engine's own model."""

from __future__ import annotations

import pytest

from sparkctl.engines import ENGINE_NAMES, get_engine
from sparkctl.engines.capabilities import Capabilities, check_options
from sparkctl.errors import ProfileError
from sparkctl.profile.base import Strict


class _Opts(Strict):
    level: int = 1


def test_every_capability_is_absent_unless_an_engine_sets_it() -> None:
    bare = Capabilities()
    names = (
        "auth",
        "memory",
        "metrics",
        "layout_flags",
        "multi_node",
        "images",
        "launch",
        "nccl_library_env",
    )
    assert all(getattr(bare, n) is None for n in (*names, "options"))
    # Every registered engine answers every capability (a record or None), so callers only test None.
    for kind in ENGINE_NAMES:
        engine = get_engine(kind)
        assert all(hasattr(engine, n) for n in names), kind


def test_the_first_two_engines_have_what_the_multi_node_callers_ask() -> None:
    for kind in ("sglang", "vllm"):
        engine = get_engine(kind)
        assert engine.multi_node is not None and engine.multi_node.host_ip_env
        assert engine.layout_flags is not None and engine.memory is not None and engine.launch is not None
        assert engine.nccl_library_env and engine.nccl_library_env.endswith("_NCCL_SO_PATH")
        assert engine.auth is not None and engine.auth.key_format == "yaml"


def test_options_are_refused_by_an_engine_that_takes_none_and_checked_by_one_that_does() -> None:
    check_options(None, {}, "toy")
    with pytest.raises(ProfileError, match=r"engine\.options: engine 'toy' takes no options \(x\)"):
        check_options(None, {"x": 1}, "toy")
    check_options(_Opts, {"level": 3}, "toy")
    with pytest.raises(ProfileError, match=r"engine\.options\.level: .*integer") as e:
        check_options(_Opts, {"level": "high"}, "toy")
    assert e.value.fix == "engine 'toy' takes engine.options: level"


def test_a_yaml_key_file_names_each_key_and_a_plain_one_holds_it_alone() -> None:
    from sparkctl.engines.capabilities import Auth

    assert Auth(("api-key",), "/k.yaml").yaml_key("api-key") == "api-key"
    assert Auth(("api-key",), "/k", "plain").yaml_key("api-key") is None


def test_a_launch_line_reader_and_launch_checks_are_asked_for_and_may_be_absent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sparkctl.engines as engines
    from sparkctl.errors import UsageError

    assert engines.command_reader("llamacpp") is None  # no engines/llamacpp/from_command.py
    assert all(engines.command_reader(k) is not None for k in ("sglang", "vllm"))
    monkeypatch.setattr(engines, "get_engine", lambda name: Capabilities())
    with pytest.raises(UsageError, match="fit: engine 'toy' has no launch-safety checks") as e:
        engines.launch_safety("toy", "fit")
    assert "sparkctl preflight" in (e.value.fix or "")


def test_sglangs_release_is_its_own_option_checked_when_planned() -> None:
    from sparkctl.engines.sglang.flags import release
    from sparkctl.planning.build import build_plan
    from sparkctl.profile import load_profile_file
    from tests.unit.profile.test_schema import ROOT

    prof = load_profile_file(ROOT / "profiles" / "solo-spark.yaml")
    assert release(prof) == "0.5.23" and get_engine("sglang").images.version_key == "version"  # type: ignore[union-attr]
    bad = prof.model_copy(update={"engine": prof.engine.model_copy(update={"options": {"release": "1"}})})
    with pytest.raises(ProfileError, match=r"engine\.options\.release: Extra inputs") as e:
        build_plan(bad, "solo")
    assert e.value.fix == "engine 'sglang' takes engine.options: version"
