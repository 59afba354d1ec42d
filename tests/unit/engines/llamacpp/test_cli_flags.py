"""llama-server's release option list: every flag sparkctl renders, manages or names is one of them."""

from __future__ import annotations

from sparkctl.engines import get_engine
from sparkctl.engines.llamacpp import check as C
from sparkctl.engines.llamacpp import flags as F
from sparkctl.engines.llamacpp.cli_flags import CLI_FLAGS, RELEASE
from sparkctl.planning.build import build_plan
from tests.unit.engines.llamacpp.test_engine import profile


def test_every_flag_sparkctl_renders_is_an_option_of_the_release() -> None:
    argv = build_plan(profile(args={"metrics": True}), "solo").ranks[0].argv
    rendered = C.argv_flags(argv, ["llama-server"])
    assert {"model", "alias", "host", "port", "api-key-file", "n-gpu-layers", "no-slots", "metrics"} <= set(
        rendered
    )
    assert set(rendered) <= CLI_FLAGS


def test_the_flags_it_manages_or_names_are_real_options() -> None:
    """A managed flag that is no option would guard nothing; a default that is none would stop the rank."""
    named = {*F.MANAGED_FLAGS, *F.RECIPE_DEFAULT_ARGS, F.NO_SLOTS, F.SLOTS}
    metrics = get_engine("llamacpp").metrics
    assert metrics is not None and metrics.enable_flag is not None
    assert sorted((named | {metrics.enable_flag}) - CLI_FLAGS) == []
    assert not any(f.startswith("-") or f != f.strip() for f in CLI_FLAGS) and len(RELEASE) == 7
