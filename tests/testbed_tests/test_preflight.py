"""`sparkctl preflight` on the real testbed: real sshd, dockerd, netns fabric, ping, host keys.

RoCE cannot run in a netns, so RoCE checks read fixture sysfs trees placed on each node under
/srv/sparknode/sys (`--sysfs-root`), with the GID of that node's real fabric IP.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.fixtures.sysfs.build import build_tree
from tests.testbed.lab import NODE_MOUNT, Lab
from tests.testbed.profiles import ENGINE_IMAGE, SEED_COMMIT, seed_weights, write_lab_profile

pytestmark = pytest.mark.testbed
COMMIT = SEED_COMMIT
SYSFS = f"{NODE_MOUNT}/sys"


def preflight(profile: Path, *args: str) -> tuple[int, dict, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "sparkctl", "preflight", "-p", str(profile), "--json", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        data = {}
    return proc.returncode, data, proc.stderr


def find(report: dict, check: str, node: str | None = None, severity: str | None = None) -> list[dict]:
    return [
        f
        for f in report["findings"]
        if f["check"] == check
        and (node is None or f["node"] == node)
        and (severity is None or f["severity"] == severity)
    ]


def errors(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["severity"] == "error"]


@pytest.fixture(scope="module")
def ready(lab: Lab) -> Iterator[Lab]:
    """Weights (target + draft snapshots) and RoCE sysfs trees on every node."""
    seed_weights(lab)
    for n in lab.nodes:
        build_tree(Path(n.node_root, "sys"), {n.fabric_netdev: n.fabric_ip})
    yield lab
    for n in lab.nodes:
        shutil.rmtree(Path(n.node_root, "hf", "hub"), ignore_errors=True)
        shutil.rmtree(Path(n.node_root, "sys"), ignore_errors=True)


def _lab_link_gbps(lab: Lab) -> float:
    """The slowest negotiated rate of the lab's fabric veths (what a healthy lab profile declares)."""
    speeds = []
    for n in lab.nodes:
        argv = [*n.nsenter(), "cat", f"/sys/class/net/{n.fabric_netdev}/speed"]
        speeds.append(int(subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()))
    return min(speeds) / 1000


def test_healthy_lab_passes_tcp(ready: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prof = write_lab_profile(ready, tmp_path / "p.yaml")
    doc = yaml.safe_load(prof.read_text())
    doc["fabric"]["min_link_gbps"] = _lab_link_gbps(ready)  # veths: far below a ConnectX-7's 200
    for role in ("target", "draft"):  # healthy = pinned (a branch is a Security UnpinnedRevision warning)
        doc["model"][role]["revision"] = COMMIT
    # healthy = keyed (a keyless API the lab opens with `expose: public` is an ApiExposure warning)
    doc["engine"]["api_key"] = {"env": "SPARKCTL_LAB_KEY"}
    doc["engine"].pop("expose", None)
    monkeypatch.setenv("SPARKCTL_LAB_KEY", "lab-healthy-key")
    prof.write_text(yaml.safe_dump(doc))
    rc, report, err = preflight(prof, "tp2")
    assert rc == 0, (err, errors(report))
    assert report["ok"] and report["nodes"] == ["spark1", "spark2"]
    for node in ("spark1", "spark2"):
        for check in (
            "SshReachable",
            "FabricNetdev",
            "Mtu",
            "PingDf",
            "DockerEngine",
            "ImagePresent",
            "ImageSame",
            "Weights",
            "StrayContainers",
            "HostIpReachable",
            "DiskFree",
        ):
            assert find(report, check, node, "ok"), (check, node)
    assert {f["data"]["dst"] for f in find(report, "PingDf", severity="ok")} == {"spark1", "spark2"}
    ports = {f["message"] for f in find(report, "PortFree", "spark1", "ok")}  # rank 0's node
    assert ports == {
        "HTTP port 30000 free",
        "engine (behind the gateway) port 20000 free",
        "dist-init port 50051 free",
    }
    assert not find(report, "RoceHca")  # transport tcp
    # Rank 0 logs in to its peer over the fabric (the lab's nodes trust each other's host keys).
    assert find(report, "SshRank0ToPeer", "spark1", "ok") and not find(
        report, "SshRank0ToPeer", severity="warn"
    )
    # The human view of the same healthy run: no warning at all, passes counted.
    human = subprocess.run(
        [sys.executable, "-m", "sparkctl", "preflight", "tp2", "-p", str(tmp_path / "p.yaml")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert human.returncode == 0 and "warn " not in human.stdout and "0 warnings" in human.stdout, (
        human.stdout
    )
    assert all(len(line) <= 80 for line in human.stdout.splitlines()), human.stdout


def test_healthy_lab_passes_roce_on_fixture_sysfs(ready: Lab, tmp_path: Path) -> None:
    prof = write_lab_profile(ready, tmp_path / "p.yaml", transport="roce")
    rc, report, err = preflight(prof, "tp2", "--sysfs-root", SYSFS)
    assert rc == 0, (err, errors(report))
    for node in ("spark1", "spark2"):
        (hca,) = find(report, "RoceHca", node, "ok")
        assert hca["data"]["hcas"] == ["roceP2p1s0f1", "rocep1s0f1"]  # hcas: auto, both PCIe halves


def test_wrong_hca_name_lists_the_right_ones(ready: Lab, tmp_path: Path) -> None:
    prof = write_lab_profile(ready, tmp_path / "p.yaml", transport="roce")
    text = prof.read_text().replace("hcas: auto", "hcas: [mlx5_0]", 2)
    prof.write_text(text)
    rc, report, _ = preflight(prof, "tp2", "--sysfs-root", SYSFS, "--only", "RoceHca")
    assert rc == 1
    for node in ("spark1", "spark2"):
        (err,) = find(report, "RoceHca", node, "error")
        assert "mlx5_0" in err["message"] and f"{SYSFS}/class/infiniband" in err["message"]
        assert "rocep1s0f1" in err["fix"] and "roceP2p1s0f1" in err["fix"]


def test_mtu_1500_on_node2(ready: Lab, tmp_path: Path) -> None:
    prof = write_lab_profile(ready, tmp_path / "p.yaml")
    ready.set_mtu("spark2", 1500)
    try:
        rc, report, _ = preflight(prof, "tp2")
    finally:
        ready.set_mtu("spark2", ready.mtu)
    assert rc == 1
    (mtu,) = find(report, "Mtu", "spark2", "error")
    assert "spark2" in mtu["message"] and ready.node("spark2").fabric_netdev in mtu["message"]
    assert "1500" in mtu["message"] and "mtu 9000" in mtu["fix"]
    assert find(report, "Mtu", "spark1", "ok")
    # The DF ping fails in both directions (spark2's own send is refused locally).
    assert find(report, "PingDf", "spark1", "error") and find(report, "PingDf", "spark2", "error")
    assert "spark2 -> spark1" in find(report, "PingDf", "spark2", "error")[0]["message"]
    for ping in find(report, "PingDf", severity="error"):  # both name the short end, from either side
        assert "path MTU 1500?" in ping["message"] and "on spark2 (it is at 1500)" in ping["fix"]
    assert {f["check"] for f in errors(report)} == {"Mtu", "PingDf"}
    # --ignore downgrades exactly those, and then the run passes.
    rc2, _, _ = preflight(prof, "tp2", "--ignore", "Mtu,PingDf")
    assert rc2 == 0


def test_link_speed_is_read_from_the_nodes_sysfs(ready: Lab, tmp_path: Path) -> None:
    """The lab's fabric netdevs are veths: their real /sys/class/net/<dev>/speed is far below a
    ConnectX-7's 200 Gb/s default, so LinkSpeed warns, naming the netdev; at the profile's own
    rate it passes."""
    prof = write_lab_profile(ready, tmp_path / "p.yaml")
    rc, report, err = preflight(prof, "tp2", "--only", "LinkSpeed")
    assert rc == 0, (err, errors(report))  # a slow link works: a warning, not an error
    for n in ready.nodes:
        argv = [*n.nsenter(), "cat", f"/sys/class/net/{n.fabric_netdev}/speed"]
        read = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()
        (warn,) = find(report, "LinkSpeed", n.name, "warn")
        assert warn["data"]["speed_mbps"] == int(read) < 200_000
        assert n.fabric_netdev in warn["message"] and "fabric.min_link_gbps" in warn["fix"]
    doc = yaml.safe_load(prof.read_text())
    doc["fabric"]["min_link_gbps"] = int(read) / 1000
    prof.write_text(yaml.safe_dump(doc))
    rc, report, _ = preflight(prof, "tp2", "--only", "LinkSpeed")
    assert rc == 0 and [f["severity"] for f in report["findings"]] == ["ok"] * len(ready.nodes)


def test_sshd_stopped_on_node2(ready: Lab, tmp_path: Path) -> None:
    prof = write_lab_profile(ready, tmp_path / "p.yaml")
    ready.stop_sshd("spark2")
    try:
        rc, report, _ = preflight(prof, "tp2")
    finally:
        ready.start_sshd("spark2")
    assert rc == 1
    (ssh,) = find(report, "SshReachable", "spark2", "error")
    assert "refused" in ssh["message"] and ssh["fix"]
    # Node 2's own checks are skipped, not failed; node 1's are all reported.
    assert find(report, "DockerEngine", "spark2", "skip") and find(report, "Mtu", "spark2", "skip")
    for check in ("SshReachable", "Mtu", "DockerEngine", "ImagePresent", "Weights", "PortFree"):
        assert find(report, check, "spark1", "ok"), check
    # The fabric itself is fine (only sshd is down): spark1 still pings spark2.
    assert find(report, "PingDf", "spark1", "ok")


def _accepted_logins(lab: Lab, node: str) -> int:
    """Logins from the controller (the lab's nodes also log in to each other: SshRank0ToPeer)."""
    log = Path(lab.node(node).data_dir, "sshd.log").read_text(errors="replace")
    return log.count(f"Accepted publickey for root from {lab.mgmt_host_ip} ")


@pytest.mark.parametrize("case", ["unknown", "changed"])
def test_unknown_or_changed_host_key_is_refused(ready: Lab, tmp_path: Path, case: str) -> None:
    n2 = ready.node("spark2")
    known = tmp_path / "known_hosts"
    lines = [
        ln for ln in Path(ready.known_hosts).read_text().splitlines() if not ln.startswith(n2.mgmt_ip + " ")
    ]
    if case == "changed":
        key = tmp_path / "other"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        lines.append(f"{n2.mgmt_ip} " + " ".join(Path(f"{key}.pub").read_text().split()[:2]))
    known.write_text("\n".join(lines) + "\n")
    prof = write_lab_profile(ready, tmp_path / "p.yaml")
    prof.write_text(prof.read_text().replace(ready.known_hosts, str(known)))
    before, before1 = _accepted_logins(ready, "spark2"), _accepted_logins(ready, "spark1")
    rc, report, _ = preflight(prof, "tp2")
    assert rc == 1
    (ssh,) = find(report, "SshReachable", "spark2", "error")
    if case == "unknown":
        assert "unknown SSH host key" in ssh["message"] and "ssh-keyscan" in ssh["fix"]
    else:
        assert "CHANGED" in ssh["message"] and "ssh-keygen -R" in ssh["fix"]
    assert find(report, "SshReachable", "spark1", "ok")
    # Refused before authentication: sshd on spark2 logged no login, so no command ran there.
    assert _accepted_logins(ready, "spark2") == before
    assert _accepted_logins(ready, "spark1") > before1  # (sshd does log logins: the proof can fail)
    assert known.read_text().count(n2.mgmt_ip) == (1 if case == "changed" else 0)  # nothing auto-added


def test_image_missing_then_different_on_node2(ready: Lab, tmp_path: Path) -> None:
    from tests.testbed.images import build_overlay_image

    prof = write_lab_profile(ready, tmp_path / "p.yaml")
    d2 = ready.docker("spark2")
    try:
        d2.images.remove(ENGINE_IMAGE, force=True)
        rc, report, _ = preflight(prof, "tp2", "--only", "ImagePresent,ImageSame")
        assert rc == 1
        (miss,) = find(report, "ImagePresent", "spark2", "error")
        assert ENGINE_IMAGE in miss["message"] and "sparkctl ship --image --to spark2" in miss["fix"]
        assert find(report, "ImagePresent", "spark1", "ok")

        ready.load_image("spark2", ENGINE_IMAGE, from_node="spark1")
        build_overlay_image(d2, ENGINE_IMAGE, ENGINE_IMAGE)  # same tag, another image ID on spark2
        rc, report, _ = preflight(prof, "tp2", "--only", "ImagePresent,ImageSame")
        assert rc == 1
        (diff,) = find(report, "ImageSame", "spark2", "error")
        want = ready.docker("spark1").images.get(ENGINE_IMAGE).id
        assert diff["data"]["want"] == want and diff["data"]["id"] == d2.images.get(ENGINE_IMAGE).id
        assert "ship --image --to spark2" in diff["fix"]
    finally:
        d2.images.remove(ENGINE_IMAGE, force=True)
        ready.load_image("spark2", ENGINE_IMAGE, from_node="spark1")


def test_unknown_check_name_is_a_usage_error(ready: Lab, tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparkctl",
            "preflight",
            "-p",
            str(write_lab_profile(ready, tmp_path / "p.yaml")),
            "--ignore",
            "Mut",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "did you mean 'Mtu'" in proc.stderr


def test_same_size_corrupt_shard_is_caught_by_content(ready: Lab, tmp_path: Path) -> None:
    """A size-only check passes a corrupted shard; the sha256 manifest does not."""
    prof = write_lab_profile(ready, tmp_path / "p.yaml")
    shards = [
        Path(
            n.node_root, "hf", "hub", "models--test-org--tiny-model", "snapshots", COMMIT, "model.safetensors"
        )
        for n in ready.nodes
    ]
    shards[0].write_bytes(b"\x01" * 4096)
    shards[1].write_bytes(b"\x01" * 2048 + b"\x02" + b"\x01" * 2047)  # same size, one byte differs
    try:
        rc, report, _ = preflight(prof, "tp2", "--only", "WeightsContent")
        assert rc == 1
        (err,) = find(report, "WeightsContent", "spark2", "error")
        assert "content differs from spark1 in 1 file(s): model.safetensors" in err["message"]
        assert "--to spark2" in err["fix"]
        shards[1].write_bytes(shards[0].read_bytes())
        rc, report, _ = preflight(prof, "tp2", "--only", "WeightsContent")
        assert rc == 0, errors(report)
        assert any(
            "content identical to spark1" in f["message"]
            for f in find(report, "WeightsContent", "spark2", "ok")
        )
    finally:
        for shard in shards:
            shard.unlink(missing_ok=True)
