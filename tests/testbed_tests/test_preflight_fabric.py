"""Preflight's image NCCL audit and node parity on the real testbed (real sshd, dockerd, images).

ImageNccl reads /etc/nccl.conf from a real image through each node's engine (one short container,
no GPU). NodeParity runs its real probe over SSH; the two nodes share this machine's kernel, so
spark2 gets stand-in `uname` and `nvidia-smi` commands (first on its PATH) printing other versions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.testbed.images import ENGINE_TAG, build_image_with_files
from tests.testbed.lab import Lab
from tests.testbed.profiles import write_lab_profile
from tests.testbed_tests.test_preflight import find, preflight

pytestmark = pytest.mark.testbed
NCCL_TAG = "sparklab/nccl-conf:1"


@pytest.fixture
def standins(lab: Lab) -> Iterator[dict[str, Path]]:
    dirs = {n.name: Path(n.node_root, "bin") for n in lab.nodes}
    for d in dirs.values():
        d.mkdir(exist_ok=True)
    yield dirs
    for d in dirs.values():
        shutil.rmtree(d, ignore_errors=True)


def smi(version: str) -> str:
    """An nvidia-smi answering the driver query and printing the banner with the CUDA version."""
    return (
        f'#!/bin/sh\ncase "$*" in *driver_version*) echo {version};; '
        f'*) echo "| NVIDIA-SMI {version}  Driver Version: {version}  CUDA Version: 13.0 |";; esac\n'
    )


def _tool(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def test_image_with_nccl_conf_is_reported_on_every_node(lab: Lab, tmp_path: Path) -> None:
    conf = b"# baked in by a base image\nNCCL_IB_USE_INLINE=1\nNCCL_DEBUG=WARN\n"
    for node in lab.nodes:
        build_image_with_files(lab.docker(node), ENGINE_TAG, NCCL_TAG, {"/etc/nccl.conf": conf})
    prof = write_lab_profile(lab, tmp_path / "p.yaml", image=NCCL_TAG)
    rc, report, err = preflight(prof, "tp2", "--only", "ImageNccl")
    assert rc == 1, (err, report)
    for node in ("spark1", "spark2"):
        (inline,) = find(report, "ImageNccl", node, "error")
        assert "/etc/nccl.conf sets NCCL_IB_USE_INLINE=1" in inline["message"]
        assert "engine.env" in inline["fix"]
        (debug,) = find(report, "ImageNccl", node, "warn")
        assert "NCCL_DEBUG=WARN" in debug["message"]
    containers = [
        c for n in lab.nodes for c in lab.docker(n).containers.list(all=True) if c.image.tags == [NCCL_TAG]
    ]
    assert containers == []  # the reading container is gone
    rc, report, err = preflight(write_lab_profile(lab, tmp_path / "q.yaml"), "tp2", "--only", "ImageNccl")
    assert rc == 0, err  # the plain stand-in image: nothing baked
    assert len(find(report, "ImageNccl", severity="ok")) == 2


def test_parity_table_names_the_driver_error(lab: Lab, standins: dict[str, Path], tmp_path: Path) -> None:
    uname = '#!/bin/sh\n[ "$1" = -r ] && { echo 6.14.0-1013-nvidia; exit 0; }\nexec /bin/uname "$@"\n'
    _tool(standins["spark2"] / "uname", uname)
    _tool(standins["spark1"] / "nvidia-smi", smi("580.95.05"))
    _tool(standins["spark2"] / "nvidia-smi", smi("580.82.09"))
    prof = write_lab_profile(lab, tmp_path / "p.yaml")
    rc, report, err = preflight(prof, "tp2", "--only", "NodeParity")
    assert rc == 1, (err, report)
    (drv,) = find(report, "NodeParity", severity="error")
    assert "NVIDIA driver differs within the replica group spark1+spark2" in drv["message"]
    (table,) = [f["data"]["table"] for f in find(report, "NodeParity") if "table" in f["data"]]  # one table
    assert table["driver"]["spark2"] == "580.82.09" and table["kernel"]["spark2"] == "6.14.0-1013-nvidia"
    assert table["kernel"]["spark1"] != "6.14.0-1013-nvidia"
    (kernel,) = [f for f in find(report, "NodeParity", severity="warn") if f["data"]["field"] == "kernel"]
    assert "spark2 6.14.0-1013-nvidia" in kernel["message"]
    human = subprocess.run(
        [sys.executable, "-m", "sparkctl", "preflight", "tp2", "-p", str(prof), "--only", "NodeParity"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "120"},
    )
    assert human.returncode == 1 and "node parity" in human.stdout, human.stdout
    driver_row = next(line for line in human.stdout.splitlines() if line.strip().startswith("driver"))
    assert "580.95.05" in driver_row and "580.82.09" in driver_row  # the one table, a row per field


def test_layout_and_cables_traced_on_the_lab_fabric(lab: Lab, tmp_path: Path) -> None:
    """Real `ip -j addr` and real link-local neighbours across the lab's fabric: the two nodes share
    one subnet (direct), and each fabric netdev hears the other node's MAC."""
    prof = write_lab_profile(lab, tmp_path / "p.yaml")
    rc, report, err = preflight(prof, "tp2", "--only", "FabricLayout,Cabling")
    assert rc == 0, (err, report)
    (layout,) = find(report, "FabricLayout", "spark1", "ok")
    subnet = lab.node("spark1").fabric_ip.rsplit(".", 1)[0] + ".0/24"  # the lab names its fabric like a CX-7
    assert layout["message"] == f"direct: spark1 port 1 <-> spark2 port 1 ({subnet})"
    (cables,) = find(report, "Cabling", "spark1")
    assert cables["severity"] == "ok" and cables["message"] == "1 cable(s) as addressed", cables


def test_a_fabric_link_without_carrier_is_a_missing_cable(lab: Lab, tmp_path: Path) -> None:
    n2 = lab.node("spark2")
    prof = write_lab_profile(lab, tmp_path / "p.yaml")
    lab.exec(n2, ["ip", "link", "set", "dev", n2.fabric_netdev, "down"])
    try:
        rc, report, err = preflight(prof, "tp2", "--only", "Cabling")
    finally:
        lab.exec(n2, ["ip", "link", "set", "dev", n2.fabric_netdev, "up"])
    assert rc == 1, (err, report)
    (missing,) = find(report, "Cabling", "spark2", "error")
    assert missing["message"].startswith(f"missing link: spark2 port 1 ({n2.fabric_netdev}) has no carrier")
    assert "should reach spark1" in missing["message"]
