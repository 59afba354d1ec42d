"""LinkSpeed: each fabric netdev's sysfs speed against fabric.min_link_gbps (a new check = one module)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.errors import UsageError
from sparkctl.facts.net import SPEEDS_MARK, parse_netdevs
from sparkctl.findings import Severity
from sparkctl.planning.build import build_plan
from sparkctl.preflight.base import Ctx, NodeFacts
from sparkctl.preflight.checks.link_speed import LinkSpeed, check_link_speed
from sparkctl.preflight.registry import CHECKS, FAST_CHECKS, REGISTRY, validate_names
from sparkctl.preflight.runner import _active
from sparkctl.profile import load_profile_file

ROOT = Path(__file__).parents[4]
FAB = "enp1s0f1np1"


def netdevs(speed: str) -> dict:
    """What NETDEV_SCRIPT prints on a node: `ip -j addr`, then `<netdev> <sysfs speed>` lines."""
    ip_json = (
        f'[{{"ifname": "{FAB}", "mtu": 9000, "operstate": "UP", "flags": ["UP", "LOWER_UP"], '
        '"addr_info": [{"family": "inet", "local": "192.168.100.10", "prefixlen": 24}]}]'
    )
    return parse_netdevs(f"{ip_json}\n{SPEEDS_MARK}\n{FAB} {speed}\n")


@pytest.fixture
def profile():
    return load_profile_file(ROOT / "profiles" / "dual-spark.yaml")


def judge(profile, speeds: dict[str, str]) -> list:
    plan = build_plan(profile, "tp2")
    ctx = Ctx(profile, plan, frozenset({"LinkSpeed"}), "/sys", REGISTRY)
    facts = {n: NodeFacts(n, values={"netdevs": netdevs(s)}) for n, s in speeds.items()}
    return LinkSpeed().judge(ctx, facts)


def test_a_link_negotiated_at_half_rate_warns_with_a_fix(profile) -> None:
    assert profile.fabric.min_link_gbps == 200  # the default: a Spark's ConnectX-7
    found = judge(profile, {"spark1": "200000", "spark2": "100000"})
    ok, slow = found
    assert (ok.node, ok.severity) == ("spark1", Severity.OK)
    assert (slow.node, slow.severity) == ("spark2", Severity.WARN)
    assert FAB in slow.message and "100 Gb/s" in slow.message and "200" in slow.message
    assert f"ethtool {FAB}" in slow.fix and "fabric.min_link_gbps" in slow.fix
    assert slow.data == {"netdev": FAB, "speed_mbps": 100000, "want_gbps": 200}


def test_the_expected_rate_is_a_profile_setting(profile) -> None:
    slower = profile.model_copy(update={"fabric": profile.fabric.model_copy(update={"min_link_gbps": 100})})
    assert [f.severity for f in judge(slower, {"spark1": "100000", "spark2": "100000"})] == [Severity.OK] * 2


def test_unknown_speed_and_missing_netdev_are_skips() -> None:
    (f,) = check_link_speed("n", [FAB], netdevs("-1"), 200)  # a link that is down reports -1
    assert f.severity is Severity.SKIP and "no speed" in f.message
    (f,) = check_link_speed("n", ["eth9"], netdevs("200000"), 200)
    assert f.severity is Severity.SKIP and "missing" in f.message


def test_registered_from_the_class_alone(profile) -> None:
    assert list(CHECKS).index("LinkSpeed") == list(CHECKS).index("Mtu") + 1
    assert "LinkSpeed" not in FAST_CHECKS  # `up` runs only the quick subset
    assert validate_names({"linkspeed"}, "--only") == {"LinkSpeed"}
    with pytest.raises(UsageError) as err:
        validate_names({"LinkSped"}, "--ignore")
    assert "did you mean 'LinkSpeed'" in (err.value.fix or "")
    plan = build_plan(profile, "solo")
    solo = Ctx(profile, plan, frozenset(CHECKS), "/sys", REGISTRY)
    assert "LinkSpeed" not in {c.name for c in _active(solo)}  # multi-node only
