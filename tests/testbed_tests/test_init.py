"""`sparkctl init` against the 2-node testbed: real sshd, dockerd, netdevs; RoCE from fixture sysfs trees.

The controller (pytest) is not a node here, so every node is given with `--node` (the first is
rank 0). Each node gets an HF cache with the model at /srv/sparknode/hf and a CX-7-like sysfs tree
(GIDs for its fabric IP) at /srv/sparknode/sysfs: the same path on every node, its own content.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from sparkctl.profile import load_profile_file
from tests.fixtures.sysfs.build import build_tree
from tests.testbed.lab import NODE_MOUNT, Lab
from tests.testbed.profiles import ENGINE_IMAGE

pytestmark = pytest.mark.testbed

MODEL = "test-org/tiny-model"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
SYSFS = f"{NODE_MOUNT}/sysfs"


@pytest.fixture(scope="module")
def seeded(lab: Lab):
    """Model snapshot and RoCE sysfs tree on every node; removed afterwards."""
    made = []
    for node in lab.nodes:
        root = Path(node.node_root)
        repo = root / "hf" / "hub" / "models--test-org--tiny-model"
        (repo / "snapshots" / COMMIT).mkdir(parents=True, exist_ok=True)
        (repo / "snapshots" / COMMIT / "config.json").write_text("{}")
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(COMMIT)
        build_tree(root / "sysfs", {node.fabric_netdev: node.fabric_ip})
        made += [root / "hf", root / "sysfs"]
    yield lab
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


def sparkctl(*args: str) -> subprocess.CompletedProcess:
    # The profile init writes reads the API key from $SPARKCTL_API_KEY ("export it before `up`"):
    # exported here as a user does; without it preflight's SecretEnvSet is rightly an error.
    env = {**os.environ, "COLUMNS": "250", "SPARKCTL_API_KEY": "init-lab-key"}
    return subprocess.run(
        [sys.executable, "-m", "sparkctl", *args], capture_output=True, text=True, env=env, timeout=300
    )


def init(lab: Lab, out: Path, *extra: str) -> subprocess.CompletedProcess:
    nodes = [a for n in lab.nodes for a in ("--node", n.mgmt_ip)]
    return sparkctl(
        "init",
        *nodes,
        "--ssh-user",
        "root",
        "--ssh-key",
        lab.ssh_key,
        "--known-hosts",
        lab.known_hosts,
        "--non-interactive",
        "--model",
        MODEL,
        "--image",
        ENGINE_IMAGE,
        "--hf-cache",
        f"{NODE_MOUNT}/hf",
        "-o",
        str(out),
        *extra,
    )


def flat(text: str) -> str:
    return " ".join(text.split())


def test_tcp_profile_passes_preflight_and_plans_the_discovered_fabric(seeded: Lab, tmp_path: Path) -> None:
    lab = seeded
    out = tmp_path / "sparkctl.yaml"
    res = init(lab, out)
    assert res.returncode == 0, res.stdout + res.stderr
    prof = load_profile_file(out)
    assert [n.name for n in prof.nodes] == ["spark1", "spark2"]  # from the nodes' hostnames
    assert prof.fabric.transport == "tcp"  # no RDMA devices in the nodes' real sysfs
    assert prof.model.target.revision == COMMIT  # refs/main, the same on both nodes: pinned
    assert {"solo", "solo-spark2", "tp2"} <= set(prof.modes)
    pre = sparkctl("preflight", "-p", str(out), "tp2")
    assert pre.returncode == 0, pre.stdout + pre.stderr
    assert "preflight passed" in pre.stdout
    plan = json.loads(sparkctl("plan", "-p", str(out), "tp2", "--json").stdout)
    a, b = lab.nodes
    assert plan["dist_init_addr"] == f"{a.fabric_ip}:50051"
    for rank, node in zip(plan["ranks"], lab.nodes, strict=True):
        env = rank["env"]
        assert env["NCCL_SOCKET_IFNAME"] == node.fabric_netdev == "enp1s0f1np1"
        assert env["SGLANG_HOST_IP"] == node.fabric_ip and env["NCCL_IB_DISABLE"] == "1"


def test_roce_from_sysfs_writes_the_hcas_plan_and_preflight_use(seeded: Lab, tmp_path: Path) -> None:
    out = tmp_path / "sparkctl.yaml"
    res = init(seeded, out, "--sysfs-root", SYSFS)
    assert res.returncode == 0, res.stdout + res.stderr
    prof = load_profile_file(out)
    assert prof.fabric.transport == "roce"
    assert all(n.fabric and n.fabric.hcas == ["rocep1s0f1", "roceP2p1s0f1"] for n in prof.nodes)
    pre = sparkctl("preflight", "-p", str(out), "tp2", "--sysfs-root", SYSFS, "--json")
    report = json.loads(pre.stdout)
    assert pre.returncode == 0 and report["ok"], pre.stdout + pre.stderr
    assert {f["node"] for f in report["findings"] if f["check"] == "RoceHca" and f["severity"] == "ok"} == {
        "spark1",
        "spark2",
    }
    plan = json.loads(sparkctl("plan", "-p", str(out), "tp2", "--json").stdout)
    assert [r["env"]["NCCL_IB_HCA"] for r in plan["ranks"]] == ["rocep1s0f1,roceP2p1s0f1"] * 2
    assert not plan["unresolved"]


def test_peer_without_a_shared_subnet_is_named(seeded: Lab, tmp_path: Path) -> None:
    lab = seeded
    two = lab.node("spark2")
    moved = two.fabric_ip.rsplit(".", 2)[0].replace("10.232", "10.233") + ".0.2"
    dev = ["ip", "addr", "{}", f"{two.fabric_ip}/24", "dev", two.fabric_netdev]
    lab.exec(two, ["ip", "addr", "del", f"{two.fabric_ip}/24", "dev", two.fabric_netdev])
    try:
        lab.exec(two, ["ip", "addr", "add", f"{moved}/24", "dev", two.fabric_netdev])
        res = init(lab, tmp_path / "p.yaml")
    finally:
        lab.exec(two, ["ip", "addr", "del", f"{moved}/24", "dev", two.fabric_netdev], check=False)
        lab.exec(two, [a.format("add") for a in dev])
    err = flat(res.stderr)
    assert res.returncode == 2, res.stdout + res.stderr
    subnet = lab.node("spark1").fabric_ip.rsplit(".", 1)[0] + ".0/24"
    assert f"spark2 has no address in {subnet} (spark1's enp1s0f1np1)" in err
    assert f"spark2 has enp1s0f1np1 {moved}/24" in err and "--fabric" in err
    assert not (tmp_path / "p.yaml").exists()


def test_peer_without_ssh_is_named(seeded: Lab, tmp_path: Path) -> None:
    lab = seeded
    two = lab.node("spark2")
    lab.stop_sshd(two)
    try:
        res = init(lab, tmp_path / "p.yaml")
    finally:
        lab.start_sshd(two)
    assert res.returncode == 5, res.stdout + res.stderr
    err = flat(res.stderr)
    assert f"cannot discover {two.mgmt_ip}: SSH connection refused by root@{two.mgmt_ip}:22" in err
    assert "start sshd" in err


# ----------------------------------------------------------------------------- --ssh-setup
USER, UID, PASSWORD = "sparkinit", 4242, "typed-once-7"


@pytest.fixture
def password_sshd(lab: Lab):
    """A second sshd in spark2's network namespace that allows password login for USER.

    It runs in its own mount namespace with private copies of /etc/passwd, shadow and group (bind
    mounted), so the user exists for that sshd only and the host's files are never touched."""
    node = lab.node("spark2")
    d = Path(tempfile.mkdtemp(prefix="sparkinit-", dir="/tmp"))  # the user must reach its home
    d.chmod(0o755)
    home = d / "home"
    home.mkdir()
    os.chown(home, UID, UID)
    hashed = subprocess.run(
        ["openssl", "passwd", "-6", PASSWORD], capture_output=True, text=True, check=True
    ).stdout.strip()
    for name, line in (
        ("passwd", f"{USER}:x:{UID}:{UID}::{home}:/bin/sh"),
        ("shadow", f"{USER}:{hashed}:19000:0:99999:7:::"),
        ("group", f"{USER}:x:{UID}:"),
    ):
        (d / name).write_text(Path(f"/etc/{name}").read_text().rstrip("\n") + f"\n{line}\n")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "hostkey")], check=True)
    port = 2222
    (d / "sshd_config").write_text(
        "\n".join(
            [
                f"Port {port}",
                f"ListenAddress {node.mgmt_ip}",
                f"HostKey {d / 'hostkey'}",
                f"PidFile {d / 'sshd.pid'}",
                "PasswordAuthentication yes",
                "PubkeyAuthentication yes",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",
                "UseDNS no",
                "AuthorizedKeysFile .ssh/authorized_keys",
                "",
            ]
        )
    )
    binds = " && ".join(f"mount --bind {d / n} /etc/{n}" for n in ("passwd", "shadow", "group"))
    proc = subprocess.Popen(
        [
            "nsenter",
            f"--net={node.netns_path}",
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            f"{binds} && exec /usr/sbin/sshd -D -e -f {d / 'sshd_config'}",
        ],
        stdout=open(d / "sshd.log", "wb"),  # noqa: SIM115 - the sshd outlives this call
        stderr=subprocess.STDOUT,
    )
    try:
        for _ in range(100):
            if (
                lab.exec(
                    node,
                    ["sh", "-c", f"cat /proc/net/tcp | grep -qi ':{port:04X} 00000000:0000 0A'"],
                    check=False,
                ).returncode
                == 0
            ):
                break
            time.sleep(0.1)
        else:
            pytest.fail("password sshd did not start: " + (d / "sshd.log").read_text())
        yield node.mgmt_ip, port, d
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(d, ignore_errors=True)


def test_ssh_setup_records_host_key_creates_and_installs_a_key(password_sshd, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from sparkctl.cli import app
    from sparkctl.connectors.ssh import SshConnector, resolve_target

    host, port, d = password_sshd
    kh, key = tmp_path / "known_hosts", tmp_path / "keys" / "id_ed25519"
    args = [
        "init",
        "--ssh-setup",
        "--peer",
        f"{USER}@{host}:{port}",
        "--known-hosts",
        str(kh),
        "--ssh-key",
        str(key),
    ]
    # Declining the fingerprint changes nothing.
    res = CliRunner().invoke(app, args, input="n\n", env={"COLUMNS": "250"})
    assert res.exit_code == 2 and "not confirmed" in res.output and not kh.exists() and not key.exists()
    res = CliRunner().invoke(app, args, input=f"y\n{PASSWORD}\n", env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    host_fp = subprocess.run(
        ["ssh-keygen", "-lf", str(d / "hostkey.pub")], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    assert host_fp in res.output  # the fingerprint shown is the server's (as ssh-keygen prints it)
    assert f"[{host}]:{port} ssh-ed25519 " in kh.read_text()
    assert key.stat().st_mode & 0o777 == 0o600 and "created key pair" in res.output
    assert "passwordless SSH works" in res.output and PASSWORD not in res.output
    # The key really logs in, through sparkctl's own strict connector.
    target = resolve_target(
        "spark2",
        host,
        user=USER,
        port=port,
        key=str(key),
        default_user=None,
        default_port=22,
        default_key=None,
        known_hosts=str(kh),
        accept_new=False,
        connect_timeout=5,
    )
    with SshConnector(target) as conn:
        assert conn.run(["id", "-un"]).stdout.strip() == USER
    # Running it again asks nothing: host key known, key login works.
    again = CliRunner().invoke(app, args, input="", env={"COLUMNS": "250"})
    assert again.exit_code == 0 and "key login already works" in again.output


def test_image_named_with_init_image_is_found_on_both_nodes(seeded: Lab, tmp_path: Path) -> None:
    """`--image REF` as people type it (no tag: Docker's `:latest`) is found on the nodes that have it."""
    out = tmp_path / "sparkctl.yaml"
    res = init(seeded, out, "--image", ENGINE_IMAGE.removesuffix(":latest"))
    assert res.returncode == 0, res.stdout + res.stderr
    text = out.read_text()
    assert "present on spark1, spark2 (same id)" in text, text
    assert "not found on any node" not in text
