"""RoCE sysfs: the real constant script (run by a real sh via the local connector) on fixture trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.connectors.local import LocalConnector
from sparkctl.facts.rdma import NoRdma, hca_candidates, is_sibling, probe_rdma
from sparkctl.findings import Severity
from sparkctl.preflight.checks.roce import check_hcas
from tests.fixtures.sysfs.build import build_tree

FIXTURES = Path(__file__).parents[2] / "fixtures" / "sysfs"
IP1 = "192.168.100.10"


@pytest.fixture(scope="module")
def devs():
    return probe_rdma(LocalConnector("spark1"), str(FIXTURES / "spark1"))


def test_script_reads_the_fixture_tree(devs) -> None:
    assert sorted(devs) == ["roceP2p1s0f0", "roceP2p1s0f1", "rocep1s0f0", "rocep1s0f1"]
    dev = devs["rocep1s0f1"]
    assert dev.netdevs == ["enp1s0f1np1"]
    port = dev.ports["1"]
    assert port.active and port.rate.startswith("200 Gb/sec") and port.link_layer == "Ethernet"
    assert (2, "0000:0000:0000:0000:0000:ffff:c0a8:640a", "enp1s0f1np1") in port.gids
    assert all(g != "0000:0000:0000:0000:0000:0000:0000:0000" for _, g, _ in port.gids)  # zero slots skipped
    assert not devs["rocep1s0f0"].active


def test_no_infiniband_dir_is_no_rdma(tmp_path: Path) -> None:
    with pytest.raises(NoRdma):
        probe_rdma(LocalConnector("x"), str(tmp_path))


def test_candidates_are_both_pcie_halves_of_the_cabled_port(devs) -> None:
    assert hca_candidates(devs, ["enp1s0f1np1"], IP1) == ["roceP2p1s0f1", "rocep1s0f1"]
    assert is_sibling("enp1s0f1np1", "enP2p1s0f1np1") and not is_sibling("enp1s0f1np1", "enP2p1s0f0np0")


def test_reference_hcas_pass(devs) -> None:
    found = check_hcas("spark1", devs, ["enp1s0f1np1"], IP1, ["rocep1s0f1", "roceP2p1s0f1"], "/sys")
    assert [f.severity for f in found] == [Severity.OK]
    assert found[0].data["hcas"] == ["rocep1s0f1", "roceP2p1s0f1"]


def test_auto_resolves_from_sysfs(devs) -> None:
    (f,) = check_hcas("spark1", devs, ["enp1s0f1np1"], IP1, "auto", "/sys")
    assert f.severity is Severity.OK and f.data["hcas"] == ["roceP2p1s0f1", "rocep1s0f1"]


def test_wrong_name_lists_the_right_ones(devs) -> None:
    found = check_hcas("spark2", devs, ["enp1s0f1np1"], IP1, ["mlx5_0"], "/srv/sparknode/sys")
    err = next(f for f in found if f.severity is Severity.ERROR)
    assert "mlx5_0" in err.message and "/srv/sparknode/sys/class/infiniband" in err.message
    assert "rocep1s0f1" in err.fix and "roceP2p1s0f1" in err.fix and err.node == "spark2"


def test_down_port_and_missing_gid_are_errors(devs) -> None:
    found = check_hcas("spark1", devs, ["enp1s0f0np0"], IP1, ["rocep1s0f0"], "/sys")
    msgs = [f.message for f in found if f.severity is Severity.ERROR]
    assert any("no port is ACTIVE" in m for m in msgs)
    assert any("has a GID for the fabric IP" in m and "held by rocep1s0f1" in m for m in msgs)


def test_device_of_another_link_warns(tmp_path: Path) -> None:
    tree = build_tree(
        tmp_path, {"enp1s0f1np1": IP1}, {"rocep1s0f1": ("enp1s0f1np1", True), "mlx5_lan": ("eno1", True)}
    )
    devs = probe_rdma(LocalConnector("n"), str(tree))
    found = check_hcas("n", devs, ["enp1s0f1np1"], IP1, ["rocep1s0f1", "mlx5_lan"], "/sys")
    assert {f.severity for f in found} == {Severity.OK, Severity.WARN}
    assert any("mlx5_lan" in f.message and "not bound" in f.message for f in found)


def test_auto_without_any_active_device_is_an_error(tmp_path: Path) -> None:
    tree = build_tree(tmp_path, {}, {"rocep1s0f1": ("enp1s0f1np1", False)})
    devs = probe_rdma(LocalConnector("n"), str(tree))
    (f,) = check_hcas("n", devs, ["enp1s0f1np1"], IP1, "auto", "/sys")
    assert f.severity is Severity.ERROR and "transport: tcp" in f.fix
