"""The fabric test's orchestration across two real testbed nodes, on CPU with gloo (issue #7).

Real SSH to each node, real per-node dockerd, containers on `--network host`, so the rendezvous
and the collectives cross the lab's fabric bridge between the nodes' network namespaces.
"""

from __future__ import annotations

import json

import pytest
import yaml

from sparkctl.connectors import NodePool
from sparkctl.findings import Severity
from sparkctl.gpu.fabric import run_fabric_test
from sparkctl.planning.build import build_plan
from sparkctl.profile.load import load_profile_text
from tests.testbed.lab import FABRIC_NETDEV, Lab
from tests.testbed.profiles import lab_profile
from tests.testbed_tests.torch_image import TORCH_TAG, install_torch_image

pytestmark = pytest.mark.testbed

pytest.importorskip(
    "torch", reason="the torch image is built from the host's torch (pip install torch==2.13.0)"
)


@pytest.fixture(scope="module")
def torch_lab(lab: Lab) -> Lab:
    install_torch_image(lab)
    return lab


def _run(lab: Lab, *, env: dict[str, str] | None = None, timeout_s: float = 60.0):
    data = lab_profile(lab, image=TORCH_TAG, engine={"env": env or {}})
    profile = load_profile_text(yaml.safe_dump(data), "<lab>")
    plan = build_plan(profile, "tp2")
    with NodePool(profile) as pool:
        conns = {n: pool.get(n) for n in plan.nodes}
        report = run_fabric_test(plan, conns, backend="gloo", sizes="64K,1M", iters=3, timeout_s=timeout_s)
        leftovers = {
            n: [c.name for c in conns[n].docker().containers.list(all=True) if "-fabric-" in c.name]
            for n in plan.nodes
        }
    return plan, report, leftovers


def test_gloo_fabric_test_runs_across_two_nodes(torch_lab: Lab) -> None:
    plan, report, leftovers = _run(torch_lab)

    assert report.severity is Severity.OK, [f.to_json() for f in report.findings]
    assert [r.phase_reached for r in report.ranks] == ["done", "done"]
    assert [r.node for r in report.ranks] == ["spark1", "spark2"]
    # Both ops at both sizes, values checked by the workers, bandwidth measured.
    assert {(row["op"], row["bytes"]) for row in report.rows} == {
        ("all_reduce", 64 << 10),
        ("all_reduce", 1 << 20),
        ("all_gather", 64 << 10),
        ("all_gather", 1 << 20),
    }
    assert all(row["correct"] and row["busbw_gbps"] > 0 for row in report.rows)
    # gloo is reported, never judged against the NCCL threshold.
    assert report.threshold_gbps is None
    bw = [f for f in report.findings if f.check == "FabricBandwidth"]
    assert len(bw) == 1 and "not judged" in bw[0].message
    # Each rank saw the plan's env and rendezvoused at rank 0's fabric address.
    spark1 = torch_lab.node("spark1")
    for r in report.ranks:
        assert r.start is not None
        assert r.start["env"]["GLOO_SOCKET_IFNAME"] == FABRIC_NETDEV
        assert r.start["dist_init_addr"].startswith(f"{spark1.fabric_ip}:")
        assert r.start["hostname"] == r.node
    assert report.ranks[0].versions["torch"] == report.ranks[1].versions["torch"]
    assert not [f for f in report.findings if f.check == "TorchDrift"]
    assert plan.dist_init_addr and plan.dist_init_addr.startswith(spark1.fabric_ip)
    assert leftovers == {"spark1": [], "spark2": []}


def test_wrong_gloo_socket_ifname_fails_clearly(torch_lab: Lab) -> None:
    _, report, leftovers = _run(torch_lab, env={"GLOO_SOCKET_IFNAME": "eth9"}, timeout_s=120.0)

    assert report.severity is Severity.ERROR
    failed = [f for f in report.findings if f.check == "FabricRank"]
    assert {f.rank for f in failed} == {0, 1}
    for f in failed:
        # A failure the worker saw and reported, not a rank we had to kill at the deadline.
        assert "failed in 'rendezvous'" in f.message
        assert "interface 'eth9'" in (f.fix or "")
    assert not any(r.timed_out for r in report.ranks)
    assert not [f for f in report.findings if f.check == "FabricBandwidth"]
    assert leftovers == {"spark1": [], "spark2": []}


def test_cli_fabric_test_gloo(torch_lab: Lab, tmp_path) -> None:
    import subprocess
    import sys

    from tests.testbed.profiles import write_lab_profile

    path = write_lab_profile(torch_lab, tmp_path / "lab.yaml", image=TORCH_TAG)
    base = [
        sys.executable,
        "-m",
        "sparkctl",
        "fabric-test",
        "tp2",
        "-p",
        str(path),
        "--backend",
        "gloo",
        "--sizes",
        "64K",
        "--iters",
        "2",
        "--timeout",
        "60",
    ]
    ok = subprocess.run(base + ["--json"], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    assert data["severity"] == "ok" and [r["phase"] for r in data["ranks"]] == ["done", "done"]
    assert {row["op"] for row in data["rows"]} == {"all_reduce", "all_gather"}

    bad = write_lab_profile(
        torch_lab, tmp_path / "bad.yaml", image=TORCH_TAG, engine={"env": {"GLOO_SOCKET_IFNAME": "eth9"}}
    )
    failed = subprocess.run([*base[:6], str(bad), *base[7:]], capture_output=True, text=True, timeout=300)
    assert failed.returncode == 1
    assert "FabricRank" in failed.stdout and "interface 'eth9'" in failed.stdout
    assert "Traceback" not in failed.stdout + failed.stderr
