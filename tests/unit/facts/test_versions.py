"""The versions probe: the real script run by sh on this machine, and its parser on GB10-shaped text."""

from __future__ import annotations

from pathlib import Path

from sparkctl.connectors.local import LocalConnector
from sparkctl.facts.versions import parse_versions, versions_probe
from tests.fixtures.sysfs.build import build_tree

FIX = Path(__file__).parents[2] / "fixtures" / "versions"


def test_parses_a_spark() -> None:
    v = parse_versions((FIX / "spark1.txt").read_text())
    assert (v.kernel, v.driver, v.cuda) == ("6.11.0-1016-nvidia", "580.95.05", "13.0")
    assert v.ofed == "25.07-0.9.7" and v.doca.startswith("3.1.0")
    assert v.firmware["roceP2p1s0f1"] == "28.45.1020" and v.value("firmware") == "28.45.1020"
    assert (v.cma_kb, v.toolkit, v.docker) == (65536, "1.17.8", "28.3.3")


def test_missing_tools_are_unknown_not_empty_strings_of_garbage() -> None:
    v = parse_versions((FIX / "bare.txt").read_text())
    assert v.driver == "" and v.cma_kb is None and v.value("cma_kb") == "" and v.docker == "27.5.1"
    assert parse_versions("ofed\tMLNX_OFED_LINUX-24.10-1.1.4.0:\n").ofed == "24.10-1.1.4.0"


def test_script_runs_here_and_reads_firmware_under_the_sysfs_root(tmp_path) -> None:
    build_tree(tmp_path, {}, fw_ver="28.99.1000")
    v = versions_probe(str(tmp_path)).run(LocalConnector("here"))
    assert v.kernel  # uname -r exists everywhere
    assert v.firmware == dict.fromkeys(
        ["roceP2p1s0f0", "roceP2p1s0f1", "rocep1s0f0", "rocep1s0f1"], "28.99.1000"
    )
