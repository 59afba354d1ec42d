"""NodeParity: one table of every node's stack; a driver difference inside a TP group is an error."""

from __future__ import annotations

from pathlib import Path

from sparkctl.facts.versions import parse_versions
from sparkctl.findings import Severity
from sparkctl.planning.build import build_plan
from sparkctl.preflight.base import Ctx, NodeFacts
from sparkctl.preflight.checks.parity import NodeParity, compare
from sparkctl.preflight.registry import REGISTRY
from sparkctl.profile import load_profile_file

ROOT = Path(__file__).parents[4]
FIX = ROOT / "tests" / "fixtures" / "versions"
E, W, OK = Severity.ERROR, Severity.WARN, Severity.OK


def versions(name: str):
    return parse_versions((FIX / name).read_text())


def judge(mode: str, per_node: dict) -> list:
    profile = load_profile_file(
        ROOT / "profiles" / ("dual-spark.yaml" if mode == "tp2" else "quad-spark.yaml")
    )
    ctx = Ctx(profile, build_plan(profile, mode), frozenset({"NodeParity"}), "/sys", REGISTRY)
    facts = {n: NodeFacts(n, values={"versions": versions(f)}) for n, f in per_node.items()}
    return NodeParity().judge(ctx, facts)


def test_same_stack_is_one_ok_row_with_the_table() -> None:
    (f,) = judge("tp2", {"spark1": "spark1.txt", "spark2": "spark1.txt"})
    assert f.severity is OK and "NVIDIA driver 580.95.05" in f.message
    assert f.data["table"]["kernel"] == {"spark1": "6.11.0-1016-nvidia", "spark2": "6.11.0-1016-nvidia"}


def test_driver_and_kernel_drift_in_a_tp_group() -> None:
    found = judge("tp2", {"spark1": "spark1.txt", "spark2": "spark2-drift.txt"})
    by = {f.data.get("field") or f.message.split(":")[0]: f for f in found}
    assert by["driver"].severity is E and "spark1 580.95.05, spark2 580.82.09" in by["driver"].message
    assert "within the replica group spark1+spark2" in by["driver"].message and by["driver"].fix
    assert by["kernel"].severity is W
    assert by["CmaTotal"].severity is E and by["CmaTotal"].node == "spark2"
    assert found[0].data["table"]["driver"] == {"spark1": "580.95.05", "spark2": "580.82.09"}  # the one table


def test_between_replicas_a_driver_difference_only_warns() -> None:
    nodes = {
        "spark1": "spark1.txt",
        "spark2": "spark1.txt",
        "spark3": "spark2-drift.txt",
        "spark4": "spark2-drift.txt",
    }
    found = judge("tp2x2", nodes)
    drv = next(f for f in found if f.data.get("field") == "driver")
    assert drv.severity is W and "between replicas" in drv.message


def test_unknown_is_not_a_difference_and_ofed_release_breaks() -> None:
    a, b = versions("spark1.txt"), versions("bare.txt")
    assert not any(f.data.get("field") == "driver" for f in compare({"a": a, "b": b}, [["a", "b"]], set()))
    c = versions("spark1.txt")
    c.ofed = "24.10-1.1.4.0"
    (f,) = compare({"a": a, "c": c}, [["a", "c"]], set())
    assert f.severity is E and "DOCA/MLNX OFED" in f.message
    c.ofed = "25.07-0.9.8"
    (f,) = compare({"a": a, "c": c}, [["a", "c"]], set())
    assert f.severity is W
