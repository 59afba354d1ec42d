"""The testbed itself (issue #3): real SSH, real engines, a real fabric, a clean teardown."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import paramiko
import pytest

from tests.testbed.images import ENGINE_TAG
from tests.testbed.lab import MGMT_NETDEV, Lab, LabError, alloc_lock

pytestmark = pytest.mark.testbed
REPO = Path(__file__).resolve().parents[2]


def wait_for(what: str, cond: Callable[[], object], timeout: float = 60, interval: float = 0.2) -> object:
    """Poll until cond() is truthy (a readiness wait, not a performance limit)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def http_status(url: str) -> int | None:
    """HTTP status of a GET, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def ssh_client(lab: Lab, ip: str, known_hosts: str | None = None) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.load_host_keys(known_hosts or lab.known_hosts)
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        ip,
        port=22,
        username="root",
        key_filename=lab.ssh_key,
        look_for_keys=False,
        allow_agent=False,
        timeout=10,
    )
    return client


def ssh_run(client: paramiko.SSHClient, command: str) -> str:
    _, stdout, _ = client.exec_command(command, timeout=30)
    out = stdout.read().decode()
    assert stdout.channel.recv_exit_status() == 0, out
    return out


@pytest.fixture
def containers(lab: Lab) -> Iterator[list[tuple[str, str]]]:
    """(node, name) of containers a test starts; removed afterwards."""
    started: list[tuple[str, str]] = []
    yield started
    for node, name in started:
        with contextlib.suppress(Exception):  # already gone is fine
            lab.docker(node).containers.get(name).remove(force=True)


def run_engine(lab: Lab, containers: list, node: str, args: list[str], env: dict | None = None):
    name = f"standin-{uuid.uuid4().hex[:8]}"
    containers.append((node, name))
    return lab.docker(node).containers.run(
        ENGINE_TAG,
        ["python3", "-m", "sglang.launch_server", *args],
        name=name,
        network_mode="host",
        environment=env or {},
        detach=True,
    )


# ------------------------------------------------------------------ SSH
def test_paramiko_verifies_host_keys(lab: Lab) -> None:
    spark1, spark2 = lab.node("spark1"), lab.node("spark2")
    with ssh_client(lab, spark2.mgmt_ip) as c:
        assert ssh_run(c, "hostname").strip() == "spark2"
        assert ssh_run(c, "echo $DOCKER_HOST").strip() == spark2.docker_host
    # The fabric is between nodes only: the controller cannot reach it (see the OpenSSH test).
    with pytest.raises(OSError):
        socket.create_connection((spark2.fabric_ip, 22), timeout=5)

    # Unknown host: RejectPolicy refuses. Wrong key for the address: paramiko refuses.
    empty = Path(lab.data_dir, "empty_known_hosts")
    empty.write_text("")
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        ssh_client(lab, spark2.mgmt_ip, str(empty))
    wrong = Path(lab.data_dir, "wrong_known_hosts")
    wrong.write_text(f"{spark2.mgmt_ip} {spark1.host_key_pub}\n")
    with pytest.raises(paramiko.BadHostKeyException):
        ssh_client(lab, spark2.mgmt_ip, str(wrong))


def test_openssh_from_node1_to_node2_over_fabric(lab: Lab) -> None:
    spark2 = lab.node("spark2")
    ssh = [
        "ssh",
        "-i",
        lab.ssh_key,
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "ConnectTimeout=10",
    ]
    out = lab.exec(
        "spark1",
        [
            *ssh,
            "-o",
            f"UserKnownHostsFile={lab.known_hosts}",
            f"root@{spark2.fabric_ip}",
            "hostname; echo $SSH_CONNECTION",
        ],
    )
    host, conn = out.stdout.split("\n", 1)
    assert host == "spark2"
    assert conn.split()[0] == lab.node("spark1").fabric_ip  # the session came from node 1 over the fabric

    bad = lab.exec(
        "spark1",
        [*ssh, "-o", "UserKnownHostsFile=/dev/null", f"root@{spark2.fabric_ip}", "true"],
        check=False,
    )
    assert bad.returncode != 0
    assert "Host key verification failed" in bad.stderr


def test_docker_api_over_ssh_reaches_that_nodes_engine(lab: Lab) -> None:
    """sparkctl drives remote engines through `docker system dial-stdio` over SSH."""
    with ssh_client(lab, lab.node("spark2").mgmt_ip) as c:
        chan = c.get_transport().open_session()
        chan.exec_command("docker system dial-stdio")
        chan.sendall(b"GET /info HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := chan.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    if b"chunked" in head.lower():
        body = b"".join(body.split(b"\r\n")[1::2])
    assert json.loads(body)["Name"] == "spark2"


def test_stop_and_start_sshd(lab: Lab) -> None:
    spark2 = lab.node("spark2")
    lab.stop_sshd("spark2")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((spark2.mgmt_ip, 22), timeout=5)
    lab.start_sshd("spark2")
    with ssh_client(lab, spark2.mgmt_ip) as c:
        assert ssh_run(c, "hostname").strip() == "spark2"


# ------------------------------------------------------------------ fabric and engines
def test_container_on_node2_answers_on_node2_fabric_address_from_node1(lab: Lab, containers: list) -> None:
    ip = lab.node("spark2").fabric_ip
    name = f"web-{uuid.uuid4().hex[:8]}"
    containers.append(("spark2", name))
    lab.docker("spark2").containers.run(
        ENGINE_TAG,
        [
            "sh",
            "-c",
            f"mkdir /www && echo served-by-$(hostname) > /www/index.html && httpd -f -p {ip}:18080 -h /www",
        ],
        name=name,
        network_mode="host",
        detach=True,
    )

    def fetch() -> str:
        get = f"import urllib.request as u; print(u.urlopen('http://{ip}:18080/', timeout=3).read().decode())"
        p = lab.exec("spark1", ["/usr/bin/python3", "-c", get], check=False)
        return p.stdout if p.returncode == 0 else ""

    assert wait_for("httpd on spark2", fetch).strip() == "served-by-spark2"


def test_df_ping_needs_mtu_9000_on_both_ends(lab: Lab) -> None:
    peer = lab.node("spark2").fabric_ip

    def df_ping(size: int) -> int:
        return lab.exec(
            "spark1", ["ping", "-M", "do", "-s", str(size), "-c", "1", "-W", "2", peer], check=False
        ).returncode

    assert df_ping(8972) == 0
    lab.set_mtu("spark2", 1500)
    assert lab.exec("spark2", ["cat", "/sys/class/net/enp1s0f1np1/mtu"]).stdout.strip() == "1500"
    assert df_ping(8972) != 0
    assert df_ping(1472) == 0


def test_egress_rate_caps_every_link_or_only_the_fabric(lab: Lab) -> None:
    n = lab.node("spark2")

    def capped() -> set[str]:
        return {
            dev
            for dev in (MGMT_NETDEV, n.fabric_netdev)
            if " tbf " in lab.exec(n, ["tc", "qdisc", "show", "dev", dev]).stdout
        }

    try:
        lab.set_egress_rate(n, 300, fabric_only=True)
        assert capped() == {n.fabric_netdev}  # the management link (the controller's SSH) stays free
        assert "rate 300Mbit" in lab.exec(n, ["tc", "qdisc", "show", "dev", n.fabric_netdev]).stdout
        lab.set_egress_rate(n, None, fabric_only=True)
        assert capped() == set()
        lab.set_egress_rate(n, 300)
        assert capped() == {MGMT_NETDEV, n.fabric_netdev}
    finally:
        lab.set_egress_rate(n, None)
    assert capped() == set()


def test_srv_sparknode_is_per_node(lab: Lab, containers: list) -> None:
    for n in lab.nodes:
        Path(n.node_root, "whoami").write_text(n.name)
    assert lab.exec("spark1", ["cat", "/srv/sparknode/whoami"]).stdout == "spark1"
    with ssh_client(lab, lab.node("spark2").mgmt_ip) as c:
        assert ssh_run(c, "cat /srv/sparknode/whoami") == "spark2"
    name = f"bind-{uuid.uuid4().hex[:8]}"
    containers.append(("spark2", name))
    c = lab.docker("spark2").containers.run(
        ENGINE_TAG,
        ["cat", "/data/whoami"],
        name=name,
        volumes={"/srv/sparknode": {"bind": "/data", "mode": "ro"}},
        detach=True,
    )
    assert c.wait(timeout=60)["StatusCode"] == 0
    assert c.logs() == b"spark2"


def test_fill_disk_gives_real_enospc(lab: Lab) -> None:
    lab.fill_disk("spark1", leave_mb=1)
    assert lab.disk_free_mb("spark1") <= 1
    write = ["dd", "if=/dev/zero", "of=/srv/sparknode/blob", "bs=1M", "count=4"]
    full = lab.exec("spark1", write, check=False)
    assert full.returncode != 0 and "No space left" in full.stderr
    assert lab.exec("spark2", write, check=False).returncode == 0  # the other node's disk is separate
    lab.free_disk("spark1")
    assert lab.exec("spark1", write, check=False).returncode == 0
    for n in lab.nodes:
        Path(n.node_root, "blob").unlink()


def test_standin_ranks_rendezvous_over_fabric(lab: Lab, containers: list) -> None:
    spark1, spark2 = lab.node("spark1"), lab.node("spark2")
    args = [
        "--model-path",
        "/models/m",
        "--served-model-name",
        "standin",
        "--tp",
        "2",
        "--nnodes",
        "2",
        "--dist-init-addr",
        f"{spark1.fabric_ip}:25000",
        "--host",
        "0.0.0.0",
        "--port",
        "30000",
        "--some-flag-it-ignores",
        "1",
    ]
    rank0 = run_engine(lab, containers, "spark1", [*args, "--node-rank", "0"], env={"HF_TOKEN": "hf_secret"})
    wait_for("rank 0 waiting", lambda: b"Init torch distributed begin" in rank0.logs())
    time.sleep(1)  # give a wrong implementation the chance to serve early
    health0 = f"http://{spark1.mgmt_ip}:30000/health"
    assert http_status(health0) != 200
    assert b"fired up" not in rank0.logs()

    rank1 = run_engine(lab, containers, "spark2", [*args, "--node-rank", "1"])
    wait_for("rank 0 ready", lambda: http_status(health0) == 200)
    assert f"Rank 1 joined from {spark2.fabric_ip}".encode() in rank0.logs()
    assert b"The server is fired up and ready to roll!" in rank0.logs()
    with urllib.request.urlopen(f"http://{spark1.mgmt_ip}:30000/v1/models", timeout=5) as r:
        assert json.load(r)["data"][0]["id"] == "standin"
    wait_for("rank 1 dummy health", lambda: http_status(f"http://{spark2.mgmt_ip}:30000/health") == 200)

    record = json.loads(rank0.exec_run(["cat", "/tmp/standin-record.json"]).output)
    assert record["argv"][-2:] == ["--node-rank", "0"] and record["env"]["HF_TOKEN"] == "hf_secret"
    assert b"hf_secret" not in rank0.logs()  # the log line masks secrets

    # A peer going away kills the job, like NCCL would.
    lab.kill_container("spark2", rank1.name)
    assert rank0.wait(timeout=60)["StatusCode"] != 0
    assert b"peer went away" in rank0.logs()


def test_standin_fault_knobs(lab: Lab, containers: list) -> None:
    failing = run_engine(
        lab,
        containers,
        "spark1",
        ["--model-path", "/m", "--port", "30001"],
        env={"STANDIN_FAIL_AT": "0:load"},
    )
    assert failing.wait(timeout=60)["StatusCode"] == 1
    logs = failing.logs()
    assert b"Load weight begin" in logs and b"injected failure at phase load" in logs
    assert b"fired up" not in logs

    lonely = run_engine(
        lab,
        containers,
        "spark2",
        ["--nnodes", "2", "--node-rank", "1", "--dist-init-addr", f"{lab.node('spark1').fabric_ip}:25001"],
        env={"STANDIN_RENDEZVOUS_TIMEOUT": "2"},
    )
    assert lonely.wait(timeout=60)["StatusCode"] != 0
    assert b"Rendezvous timed out" in lonely.logs()


# ------------------------------------------------------------------ lifecycle
def _lab_footprint(lab: Lab) -> dict[str, object]:
    ip_links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return {
        "netns": [
            n.netns
            for n in lab.nodes
            if n.netns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        ],
        "links": [w for w in ip_links.split() if w.startswith(f"sl{lab.id}")],
        "routes": [
            r
            for r in subprocess.run(["ip", "route"], capture_output=True, text=True).stdout.splitlines()
            if lab.fabric_subnet in r
        ],
        "mounts": [
            line
            for line in Path("/proc/self/mounts").read_text().splitlines()
            if f"/sparklab/{lab.id}/" in line
        ],
        "dirs": [str(p) for p in (lab.run_dir, lab.data_dir) if p.exists()],
        "iptables": [
            r
            for r in subprocess.run(
                ["iptables", "-S", "FORWARD"], capture_output=True, text=True
            ).stdout.splitlines()
            if f"sl{lab.id}-" in r
        ],
    }


def _alive(pid: int) -> bool:
    try:
        return not Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")
    except OSError:
        return False


def test_teardown_leaves_nothing(make_lab: Callable[..., Lab]) -> None:
    lab = make_lab(nodes=3)
    other = make_lab(nodes=2, engine_image=False)  # labs coexist: own ids, own names, own subnets
    assert lab.id != other.id and lab.node("spark1").mgmt_ip != other.node("spark1").mgmt_ip
    pids = []
    for n in lab.nodes:
        c = lab.docker(n).containers.run(ENGINE_TAG, ["sleep", "3600"], network_mode="host", detach=True)
        pids.append(c.attrs["State"]["Pid"] or lab.docker(n).containers.get(c.id).attrs["State"]["Pid"])
        pids += [n.sshd_pid, n.dockerd_pid]
    pids += [p for p in _children_of({n.dockerd_pid for n in lab.nodes})]  # containerd, shims
    assert all(_alive(p) for p in pids)
    before = _lab_footprint(lab)
    assert all(before.values()), before

    lab.down()
    assert not [p for p in pids if _alive(p)]
    assert _lab_footprint(lab) == {
        "netns": [],
        "links": [],
        "routes": [],
        "mounts": [],
        "dirs": [],
        "iptables": [],
    }
    assert other.exec("spark2", ["hostname"]).stdout.strip() == "spark2"  # the other lab is untouched
    lab.down()  # idempotent


def _children_of(parents: set[int]) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(") ", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid in parents:
                out.append(int(d))
    return out


def test_lab_of_a_killed_process_can_be_torn_down() -> None:
    name = f"orphan-{uuid.uuid4().hex[:6]}"
    code = f"from tests.testbed import Lab; import time; Lab({name!r}, nodes=2).up(); print('up', flush=True); time.sleep(600)"
    owner = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout.readline().strip() == "up"
        # Hold the allocation lock so no concurrent lab allocation reaps the orphan before we do.
        with alloc_lock():
            owner.kill()
            owner.wait()
            orphan = Lab.attach(name=name)
            assert all(_alive(n.dockerd_pid) and _alive(n.sshd_pid) for n in orphan.nodes)
            out = subprocess.run(
                [sys.executable, "-m", "tests.testbed", "down", "--name", name],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=120,
            )
        assert out.returncode == 0, out.stderr
        assert not any(_alive(n.dockerd_pid) or _alive(n.sshd_pid) for n in orphan.nodes)
        assert _lab_footprint(orphan) == {
            "netns": [],
            "links": [],
            "routes": [],
            "mounts": [],
            "dirs": [],
            "iptables": [],
        }
        with pytest.raises(LabError):
            Lab.attach(name=name)
    finally:
        if owner.poll() is None:
            owner.kill()
