"""A real multi-node lab on one Linux host: network namespaces + sshd + dockerd per node.

Each node is a set of namespaces: net (own mgmt and fabric netdevs), mount (a private tmpfs of
``disk_mb`` at ``/srv/sparknode``) and UTS (hostname ``sparkN``). Inside them run the node's own
sshd and dockerd, so SSH sessions and container bind mounts on node N see node N's disk, and
``--network host`` containers listen on node N's addresses. See docs/testbed.md.

Everything a lab creates is named from its numeric id (``sl<id>-...``), which is allocated under
a lock in /run/sparklab so several labs (several pytest sessions) can run at once. The state
file /run/sparklab/<id>/state.json lets ``down()`` clean up a lab whose owner was killed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import docker

STATE_ROOT = Path(os.environ.get("SPARKLAB_STATE_ROOT", "/run/sparklab"))
DATA_ROOT = Path(os.environ.get("SPARKLAB_DATA_ROOT", "/var/lib/sparklab"))
NODE_MOUNT = "/srv/sparknode"
STANDIN_BIN = f"{NODE_MOUNT}/bin"  # each node's own stand-in commands, first on root's PATH over SSH
STANDIN_PATH = f"{STANDIN_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MGMT_NETDEV = "eth0"
FABRIC_NETDEV = "enp1s0f1np1"
HOST_MTU = 9000  # host-side veth ends and bridges: a node at 1500 is then the bottleneck
MAX_ID = 250
MAX_NODES = 8
REQUIRED_TOOLS = ("ip", "nsenter", "unshare", "sshd", "ssh", "ssh-keygen", "dockerd", "docker", "mount")


class LabError(RuntimeError):
    """The lab could not be brought up or driven; the message says which step and why."""


def missing_prerequisites() -> list[str]:
    """Why a lab cannot run here (empty when it can): not root, or tools missing."""
    problems = []
    if os.geteuid() != 0:
        problems.append("not running as root")
    missing = [t for t in REQUIRED_TOOLS if shutil.which(t) is None]
    if missing:
        problems.append("missing tools: " + ", ".join(missing))
    return problems


def _run(argv: list[str], check: bool = True, timeout: float = 60, **kw: Any) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise LabError(
            f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}"
        )
    return proc


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z"):
            return False
    return True


def _pid_start(pid: int) -> str | None:
    """Process start time (jiffies since boot): tells a live owner from a reused pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@dataclass
class LabNode:
    name: str
    index: int
    netns: str
    mgmt_ip: str
    fabric_ip: str
    fabric_netdev: str
    ssh_port: int
    docker_host: str
    node_root: str  # host path backing /srv/sparknode on this node
    host_key_pub: str
    run_dir: str
    data_dir: str
    mtu: int
    sshd_pid: int | None = None
    dockerd_pid: int | None = None

    @property
    def mnt_ns(self) -> str:
        return f"{self.run_dir}/mnt.ns"

    @property
    def uts_ns(self) -> str:
        return f"{self.run_dir}/uts.ns"

    @property
    def netns_path(self) -> str:
        return f"/run/netns/{self.netns}"

    def nsenter(self) -> list[str]:
        """argv prefix that runs a command inside this node (net + mount + UTS namespaces)."""
        return ["nsenter", f"--net={self.netns_path}", f"--mount={self.mnt_ns}", f"--uts={self.uts_ns}", "--"]


@dataclass
class _State:
    id: int
    name: str
    mtu: int
    disk_mb: int
    owner_pid: int | None
    owner_start: str | None
    nodes: list[dict[str, Any]] = field(default_factory=list)
    iptables: list[list[str]] = field(default_factory=list)


class Lab:
    """N nodes with real sshd and dockerd each. Use as a context manager or call up()/down()."""

    def __init__(
        self,
        name: str | None = None,
        nodes: int = 2,
        mtu: int = 9000,
        disk_mb: int = 2048,
        *,
        persistent: bool = False,
    ) -> None:
        if not 1 <= nodes <= MAX_NODES:
            raise ValueError(f"nodes must be 1..{MAX_NODES}, got {nodes}")
        self.requested_name = name
        self.node_count = nodes
        self.mtu = mtu
        self.disk_mb = disk_mb
        # persistent labs (the CLI) outlive their creator; others are reaped once it dies.
        self.persistent = persistent
        self.id: int | None = None
        self.name: str = name or ""
        self.nodes: list[LabNode] = []
        self._iptables: list[list[str]] = []
        self._procs: dict[int, subprocess.Popen] = {}
        self._clients: dict[str, docker.DockerClient] = {}
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- naming and paths
    @property
    def run_dir(self) -> Path:
        return STATE_ROOT / str(self.id)

    @property
    def data_dir(self) -> Path:
        return DATA_ROOT / str(self.id)

    @property
    def ssh_key(self) -> str:
        return str(self.data_dir / "id_ed25519")

    @property
    def known_hosts(self) -> str:
        return str(self.data_dir / "known_hosts")

    @property
    def ssh_config(self) -> str:
        return str(self.data_dir / "ssh_config")

    @property
    def mgmt_bridge(self) -> str:
        return f"sl{self.id}-mgmt"

    @property
    def fabric_bridge(self) -> str:
        return f"sl{self.id}-fab"

    @property
    def fabric_subnet(self) -> str:
        return f"10.232.{self.id}.0/24"

    @property
    def mgmt_host_ip(self) -> str:
        return f"10.231.{self.id}.254"

    def _make_nodes(self) -> None:
        self.nodes = []
        for i in range(1, self.node_count + 1):
            name = f"spark{i}"
            run_dir = self.run_dir / name
            data_dir = self.data_dir / name
            self.nodes.append(
                LabNode(
                    name=name,
                    index=i,
                    netns=f"sl{self.id}-{name}",
                    mgmt_ip=f"10.231.{self.id}.{i}",
                    fabric_ip=f"10.232.{self.id}.{i}",
                    fabric_netdev=FABRIC_NETDEV,
                    ssh_port=22,
                    docker_host=f"unix://{run_dir}/docker.sock",
                    node_root=str(data_dir / "srv"),
                    host_key_pub="",
                    run_dir=str(run_dir),
                    data_dir=str(data_dir),
                    mtu=self.mtu,
                )
            )

    def node(self, name: str | LabNode) -> LabNode:
        if isinstance(name, LabNode):
            return name
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node {name!r} in lab {self.name} (nodes: {[n.name for n in self.nodes]})")

    # ---------------------------------------------------------------- state
    def _state(self) -> _State:
        return _State(
            id=self.id or 0,
            name=self.name,
            mtu=self.mtu,
            disk_mb=self.disk_mb,
            owner_pid=None if self.persistent else os.getpid(),
            owner_start=None if self.persistent else _pid_start(os.getpid()),
            nodes=[asdict(n) for n in self.nodes],
            iptables=self._iptables,
        )

    def _save_state(self) -> None:
        with self._lock:
            tmp = self.run_dir / "state.json.tmp"
            tmp.write_text(json.dumps(asdict(self._state()), indent=1))
            tmp.replace(self.run_dir / "state.json")

    @classmethod
    def attach(cls, name: str | None = None, lab_id: int | None = None) -> Lab:
        """A Lab object for an existing lab (by name or id), e.g. to tear down one left behind."""
        for state in list_labs():
            if (lab_id is not None and state["id"] == lab_id) or (name is not None and state["name"] == name):
                return cls._from_state(state)
        raise LabError(f"no lab named {name!r}" if name is not None else f"no lab with id {lab_id}")

    @classmethod
    def _from_state(cls, state: dict[str, Any]) -> Lab:
        lab = cls(
            state["name"], nodes=max(1, len(state["nodes"])), mtu=state["mtu"], disk_mb=state["disk_mb"]
        )
        lab.id = state["id"]
        lab.persistent = state["owner_pid"] is None
        lab.nodes = [LabNode(**n) for n in state["nodes"]]
        lab.node_count = len(lab.nodes)
        lab._iptables = state.get("iptables", [])
        return lab

    # ---------------------------------------------------------------- id allocation
    def _allocate(self) -> None:
        with alloc_lock():
            _ensure_private_mount(STATE_ROOT)
            reap_orphans()
            states = list_labs()
            taken = {s["id"] for s in states} | {
                int(p.name) for p in STATE_ROOT.iterdir() if p.is_dir() and p.name.isdigit()
            }
            if self.requested_name and any(s["name"] == self.requested_name for s in states):
                raise LabError(
                    f"a lab named {self.requested_name!r} already exists; "
                    f"run `python -m tests.testbed down --name {self.requested_name}`"
                )
            forced = os.environ.get("SPARKLAB_ID")
            if forced:
                lab_id = int(forced)
                if not 1 <= lab_id <= MAX_ID:
                    raise LabError(f"SPARKLAB_ID must be 1..{MAX_ID}")
                if lab_id in taken:
                    raise LabError(f"lab id {lab_id} (SPARKLAB_ID) is in use; tear it down first")
            else:
                free = [i for i in range(1, MAX_ID + 1) if i not in taken]
                if not free:
                    raise LabError("no free lab id in /run/sparklab; tear down old labs")
                lab_id = free[0]
            self.id = lab_id
            self.name = self.requested_name or f"lab{lab_id}"
            self.run_dir.mkdir(parents=True)
            self._make_nodes()
            self._save_state()

    # ---------------------------------------------------------------- up
    def __enter__(self) -> Lab:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> Lab:
        problems = missing_prerequisites()
        if problems:
            raise LabError("cannot bring up a lab: " + "; ".join(problems))
        self._allocate()
        try:
            self._up_network()
            self._write_client_files_keys()
            with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
                list(pool.map(self._up_node, self.nodes))
            self._write_known_hosts()
            self._authorize_nodes()
            self._save_state()
            with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
                list(pool.map(self._wait_node, self.nodes))
                list(pool.map(self._install_gateway, self.nodes))
        except BaseException:
            with contextlib.suppress(Exception):
                self.down()
            raise
        return self

    def _up_network(self) -> None:
        Path(self.data_dir).mkdir(parents=True, exist_ok=True)
        for br in (self.mgmt_bridge, self.fabric_bridge):
            _run(["ip", "link", "add", br, "mtu", str(HOST_MTU), "type", "bridge"])
            _run(["ip", "link", "set", br, "up"])
        _run(["ip", "addr", "add", f"{self.mgmt_host_ip}/24", "dev", self.mgmt_bridge])
        # The controller is on mgmt only (like a real one); traffic it sends to a fabric address must
        # fail here rather than leave through the default route.
        _run(["ip", "route", "replace", "unreachable", self.fabric_subnet])
        if shutil.which("iptables"):
            # A dockerd in the root namespace sets FORWARD to DROP, which would drop bridged traffic.
            for br in (self.mgmt_bridge, self.fabric_bridge):
                rule = ["FORWARD", "-i", br, "-o", br, "-j", "ACCEPT"]
                _run(["iptables", "-w", "-I", *rule])
                self._iptables.append(rule)
        self._save_state()

    def _write_client_files_keys(self) -> None:
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"sparklab-{self.id}", "-f", self.ssh_key])

    def _up_node(self, node: LabNode) -> None:
        run_dir, data_dir = Path(node.run_dir), Path(node.data_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        data_dir.mkdir(parents=True, exist_ok=True)
        # Network: veth pairs created straight into the namespace under their final names.
        _run(["ip", "netns", "add", node.netns])
        ns = ["ip", "-n", node.netns]
        for kind, dev, bridge, ip in (
            ("m", MGMT_NETDEV, self.mgmt_bridge, node.mgmt_ip),
            ("f", FABRIC_NETDEV, self.fabric_bridge, node.fabric_ip),
        ):
            host_end = f"sl{self.id}{kind}{node.index}"
            _run(
                [
                    "ip",
                    "link",
                    "add",
                    host_end,
                    "mtu",
                    str(HOST_MTU),
                    "type",
                    "veth",
                    "peer",
                    "name",
                    dev,
                    "netns",
                    node.netns,
                ]
            )
            _run(["ip", "link", "set", host_end, "master", bridge, "up"])
            mtu = HOST_MTU if kind == "m" else node.mtu
            _run([*ns, "link", "set", dev, "mtu", str(mtu), "up"])
            _run([*ns, "addr", "add", f"{ip}/24", "dev", dev])
        _run([*ns, "link", "set", "lo", "up"])

        # Disk: a size-limited tmpfs, so filling it gives a real ENOSPC.
        Path(node.node_root).mkdir(parents=True, exist_ok=True)
        _run(
            [
                "mount",
                "-t",
                "tmpfs",
                "-o",
                f"size={self.disk_mb}m,mode=0755",
                f"sparklab{self.id}",
                node.node_root,
            ]
        )
        Path(NODE_MOUNT).mkdir(parents=True, exist_ok=True)
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege separation dir
        for f in ("mnt.ns", "uts.ns"):
            (run_dir / f).touch()
        # Mount + UTS namespaces, kept alive by bind mounts of their ns files; set up from inside
        # the node's netns so the node gets its own sysfs (its own /sys/class/net).
        tmp = run_dir / "sys-tmp"
        tmp.mkdir(exist_ok=True)
        _run(
            [
                "nsenter",
                f"--net={node.netns_path}",
                "unshare",
                f"--mount={node.mnt_ns}",
                f"--uts={node.uts_ns}",
                "--propagation",
                "private",
                sys.executable,
                "-c",
                _NODE_SETUP,
                node.name,
                node.node_root,
                str(DATA_ROOT),
                str(STATE_ROOT),
                NODE_MOUNT,
                str(tmp),
            ]
        )

        self._node_ssh_dir(node)
        self._write_sshd_config(node)
        self._start_sshd(node)
        self._start_dockerd(node)
        self._save_state()

    def _node_ssh_dir(self, node: LabNode) -> None:
        """The node's own ~/.ssh (a key pair; known_hosts and authorization come in up()), bind-mounted
        over /root/.ssh in its mount namespace: node-to-node SSH as `init --ssh-setup` leaves it."""
        dot = Path(node.data_dir) / "dotssh"
        dot.mkdir(mode=0o700, exist_ok=True)
        _run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                f"root@{node.name}",
                "-f",
                str(dot / "id_ed25519"),
            ]
        )
        Path("/root/.ssh").mkdir(mode=0o700, exist_ok=True)  # the mount point (stays empty here)
        _run([*node.nsenter(), "mount", "--bind", str(dot), "/root/.ssh"])

    def _authorize_nodes(self) -> None:
        """Every node trusts every node's key and knows every node's host key (mgmt and fabric IPs)."""
        keys = [Path(n.data_dir, "dotssh", "id_ed25519.pub").read_text().strip() for n in self.nodes]
        known = Path(self.known_hosts).read_text()
        for n in self.nodes:
            with open(Path(n.data_dir) / "authorized_keys", "a") as fh:
                fh.write("\n".join(keys) + "\n")
            Path(n.data_dir, "dotssh", "known_hosts").write_text(known)

    def _write_sshd_config(self, node: LabNode) -> None:
        data_dir = Path(node.data_dir)
        key = data_dir / "ssh_host_ed25519_key"
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{node.name}-host", "-f", str(key)])
        node.host_key_pub = " ".join(Path(f"{key}.pub").read_text().split()[:2])
        shutil.copy(f"{self.ssh_key}.pub", data_dir / "authorized_keys")
        (data_dir / "home").mkdir(mode=0o700, exist_ok=True)
        (data_dir / "sshd_config").write_text(
            "\n".join(
                [
                    f"Port {node.ssh_port}",
                    f"ListenAddress {node.mgmt_ip}",
                    f"ListenAddress {node.fabric_ip}",
                    f"HostKey {key}",
                    f"PidFile {node.run_dir}/sshd.pid",
                    f"AuthorizedKeysFile {data_dir}/authorized_keys",
                    "PermitRootLogin prohibit-password",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    "UseDNS no",
                    "PrintMotd no",
                    "MaxStartups 100:30:200",
                    "MaxSessions 100",
                    # VERBOSE logs each exec ("Starting session: command for root from <ip>"), so
                    # tests count the remote commands a sparkctl run cost, not only its logins.
                    "LogLevel VERBOSE",
                    "Subsystem sftp internal-sftp",
                    # docker over SSH (incl. `docker system dial-stdio`) reaches this node's engine; root
                    # gets the node's own HOME (its hash cache, a plain shell without this host's rc
                    # files). Other users (tests' throwaway login users) keep their own HOME. The first
                    # matching block wins. PATH starts with the node's own bin/ (empty unless a test puts
                    # a stand-in there, e.g. an nvidia-smi or uname printing another version).
                    "Match User root",
                    f"  SetEnv DOCKER_HOST={node.docker_host} HOME={data_dir / 'home'} PATH={STANDIN_PATH}",
                    "Match all",
                    f"  SetEnv DOCKER_HOST={node.docker_host}",
                    "",
                ]
            )
        )

    def _spawn(self, node: LabNode, argv: list[str], log: str) -> subprocess.Popen:
        with open(Path(node.data_dir) / log, "ab") as out:
            proc = subprocess.Popen(
                [*node.nsenter(), *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # survives the CLI process and terminal hang-ups
            )
        self._procs[proc.pid] = proc
        return proc

    def _start_sshd(self, node: LabNode) -> None:
        # nsenter without --fork execs the daemon, so the Popen pid is sshd's own pid.
        proc = self._spawn(
            node, ["/usr/sbin/sshd", "-D", "-e", "-f", f"{node.data_dir}/sshd_config"], "sshd.log"
        )
        node.sshd_pid = proc.pid

    def _start_dockerd(self, node: LabNode) -> None:
        cfg = Path(node.data_dir) / "daemon.json"
        cfg.write_text("{}\n")  # isolate from /etc/docker/daemon.json
        proc = self._spawn(
            node,
            [
                "dockerd",
                f"--config-file={cfg}",
                f"--data-root={node.data_dir}/docker",
                f"--exec-root={node.run_dir}/exec",
                f"--host={node.docker_host}",
                f"--pidfile={node.run_dir}/docker.pid",
                "--bridge=none",
                "--iptables=false",
                "--ip-masq=false",
                "--storage-driver=overlay2",
                "--log-level=warn",
            ],
            "dockerd.log",
        )
        node.dockerd_pid = proc.pid

    def _install_gateway(self, node: LabNode) -> None:
        """Every node has the gateway image, as `up` needs on a real one (docs/security.md): the
        HAProxy the host has (scripts/install-deps), loaded from the cached archive."""
        from tests.testbed.gateway_image import haproxy_path, install_gateway_image

        if haproxy_path() is not None:
            install_gateway_image(self, node)

    def _wait_node(self, node: LabNode, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        self._wait_port(node, node.mgmt_ip, node.ssh_port, deadline, "sshd", node.sshd_pid)
        sock = node.docker_host.removeprefix("unix://")
        while True:
            if not _pid_alive(node.dockerd_pid):
                raise LabError(
                    f"{node.name}: dockerd exited during start-up:\n{self._log_tail(node, 'dockerd.log')}"
                )
            with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as s:
                s.settimeout(2)
                s.connect(sock)
                s.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
                if b" 200 " in s.recv(256):
                    return
            if time.monotonic() > deadline:
                raise LabError(
                    f"{node.name}: dockerd not ready after {timeout}s:\n{self._log_tail(node, 'dockerd.log')}"
                )
            time.sleep(0.1)

    def _wait_port(
        self, node: LabNode, ip: str, port: int, deadline: float, what: str, pid: int | None
    ) -> None:
        while True:
            if not _pid_alive(pid):
                raise LabError(
                    f"{node.name}: {what} exited during start-up:\n{self._log_tail(node, what + '.log')}"
                )
            with contextlib.suppress(OSError), socket.create_connection((ip, port), timeout=1):
                return
            if time.monotonic() > deadline:
                raise LabError(
                    f"{node.name}: {what} not listening on {ip}:{port}:\n{self._log_tail(node, what + '.log')}"
                )
            time.sleep(0.05)

    @staticmethod
    def _log_tail(node: LabNode, log: str, lines: int = 20) -> str:
        try:
            return "\n".join(Path(node.data_dir, log).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _write_known_hosts(self) -> None:
        lines = []
        for n in self.nodes:
            lines += [f"{n.mgmt_ip} {n.host_key_pub}", f"{n.fabric_ip} {n.host_key_pub}"]
        Path(self.known_hosts).write_text("\n".join(lines) + "\n")
        # `Host spark1` maps the node name to its mgmt address; the IP entries keep their own host.
        text = []
        for n in self.nodes:
            text += [f"Host {n.name}", f"  HostName {n.mgmt_ip}"]
        text += [
            "",
            "Host " + " ".join(f"{n.name} {n.mgmt_ip} {n.fabric_ip}" for n in self.nodes),
            "  User root",
            "  Port 22",
            f"  IdentityFile {self.ssh_key}",
            "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {self.known_hosts}",
            "  StrictHostKeyChecking yes",
            "  BatchMode yes",
            "",
        ]
        Path(self.ssh_config).write_text("\n".join(text))

    def exec(
        self,
        node: str | LabNode,
        argv: list[str],
        check: bool = True,
        timeout: float = 60,
        input: str | None = None,
    ) -> subprocess.CompletedProcess:
        """Run argv inside the node's namespaces (as root, like an SSH session would)."""
        n = self.node(node)
        proc = subprocess.run(
            [*n.nsenter(), *argv], capture_output=True, text=True, timeout=timeout, input=input
        )
        if check and proc.returncode != 0:
            raise LabError(f"{n.name}: {argv} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def docker(self, node: str | LabNode) -> docker.DockerClient:
        import docker

        n = self.node(node)
        if n.name not in self._clients:
            self._clients[n.name] = docker.DockerClient(base_url=n.docker_host, timeout=120)
        return self._clients[n.name]

    def set_mtu(self, node: str | LabNode, mtu: int) -> None:
        n = self.node(node)
        _run(["ip", "-n", n.netns, "link", "set", "dev", n.fabric_netdev, "mtu", str(mtu)])
        n.mtu = mtu
        self._save_state()

    def set_egress_rate(self, node: str | LabNode, mbit: int | None, fabric_only: bool = False) -> None:
        """Cap (or, with None, uncap) what leaves the node on every link: a slow line, so a test can
        act in the middle of a transfer whatever the machine's speed. fabric_only: only the fabric
        netdev (node-to-node traffic), the management link (the controller's SSH) stays free."""
        n = self.node(node)
        if fabric_only:
            devs = [n.fabric_netdev]
        else:
            out = _run(["ip", "-n", n.netns, "-o", "link", "show"]).stdout
            devs = [ln.split(":")[1].strip().split("@")[0] for ln in out.splitlines() if ": lo:" not in ln]
        for dev in devs:
            if mbit is None:
                subprocess.run(["tc", "-n", n.netns, "qdisc", "del", "dev", dev, "root"], capture_output=True)
            else:
                _run(
                    [
                        "tc",
                        "-n",
                        n.netns,
                        "qdisc",
                        "replace",
                        "dev",
                        dev,
                        "root",
                        "tbf",
                        "rate",
                        f"{mbit}mbit",
                        "burst",
                        "64kb",
                        "latency",
                        "500ms",
                    ]
                )

    def set_fabric_link(self, node: str | LabNode, up: bool) -> None:
        """Pull (or plug back) the node's fabric cable at the switch: its host-side veth end goes
        down, so the node loses carrier and every node-to-node packet is dropped, while its own
        netdev, address and routes stay as they were and the management link (SSH) is untouched."""
        n = self.node(node)
        _run(["ip", "link", "set", f"sl{self.id}f{n.index}", "up" if up else "down"])

    def stop_sshd(self, node: str | LabNode, kill_sessions: bool = False) -> None:
        """Stop the node's listening sshd (new connections are refused); optionally drop sessions too."""
        n = self.node(node)
        pids = [n.sshd_pid] if n.sshd_pid else []
        if kill_sessions:
            pids += [p for p in _netns_pids(n.netns) if _comm(p) == "sshd"]
        _kill_and_wait(pids)
        self._reap(pids)
        n.sshd_pid = None
        self._save_state()

    def start_sshd(self, node: str | LabNode) -> None:
        n = self.node(node)
        if _pid_alive(n.sshd_pid):
            return
        self._start_sshd(n)
        self._save_state()
        self._wait_port(n, n.mgmt_ip, n.ssh_port, time.monotonic() + 30, "sshd", n.sshd_pid)

    def restart_dockerd(self, node: str | LabNode, timeout: float = 60) -> None:
        """Stop the node's dockerd (SIGTERM, as a shutdown does) and start it again, as a reboot
        would: its containers stay, exited (none has a restart policy)."""
        n = self.node(node)
        pid = n.dockerd_pid
        if pid and _pid_alive(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while _pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            _kill_and_wait([pid])
            self._reap([pid])
        self._start_dockerd(n)
        self._save_state()
        self._wait_node(n, timeout)

    def kill_container(self, node: str | LabNode, name: str, sig: str = "SIGKILL") -> None:
        self.docker(node).containers.get(name).kill(signal=sig)

    def disk_free_mb(self, node: str | LabNode) -> int:
        st = os.statvfs(self.node(node).node_root)
        return st.f_bavail * st.f_frsize // (1024 * 1024)

    def fill_disk(self, node: str | LabNode, leave_mb: int = 0) -> None:
        """Fill the node's /srv/sparknode until only leave_mb MiB are free (real ENOSPC beyond)."""
        n = self.node(node)
        size = (self.disk_free_mb(n) - leave_mb) * 1024 * 1024
        if size <= 0:
            return
        path = Path(n.node_root) / ".sparklab-fill"
        with open(path, "ab") as fh:
            os.posix_fallocate(fh.fileno(), fh.tell(), size)

    def free_disk(self, node: str | LabNode) -> None:
        with contextlib.suppress(FileNotFoundError):
            (Path(self.node(node).node_root) / ".sparklab-fill").unlink()

    def load_image(self, node: str | LabNode, ref: str, from_node: str | LabNode) -> None:
        """Copy an image between node engines (lab plumbing: docker save | docker load)."""
        src, dst = self.node(from_node), self.node(node)
        save = subprocess.Popen(["docker", "-H", src.docker_host, "save", ref], stdout=subprocess.PIPE)
        load = subprocess.run(
            ["docker", "-H", dst.docker_host, "load", "-q"],
            stdin=save.stdout,
            capture_output=True,
            text=True,
            timeout=600,
        )
        save.stdout.close()  # type: ignore[union-attr]
        if save.wait() != 0 or load.returncode != 0:
            raise LabError(f"load_image {ref} {src.name}->{dst.name} failed: {load.stderr.strip()}")

    def install_engine_image(self, pad_mb: int = 0, tag: str | None = None) -> str:
        """Build the stand-in engine on the first node and load it on the others (same image id).

        Without pad_mb every node loads the cached archive at once (same id by construction)."""
        from tests.testbed.images import ENGINE_TAG, build_engine_image

        tag = tag or ENGINE_TAG
        if not pad_mb:
            with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
                ids = set(pool.map(lambda n: build_engine_image(self.docker(n), tag=tag), self.nodes))
            return ids.pop()
        first = self.nodes[0]
        image_id = build_engine_image(self.docker(first), tag=tag, pad_mb=pad_mb)
        with ThreadPoolExecutor(max_workers=max(1, len(self.nodes) - 1)) as pool:
            list(pool.map(lambda n: self.load_image(n, tag, from_node=first), self.nodes[1:]))
        return image_id

    def reset(self) -> None:
        """Undo the fault knobs (MTU, pulled fabric link, stopped sshd, filled disk); containers are
        left alone."""
        for n in self.nodes:
            self.set_fabric_link(n, up=True)
            if n.mtu != self.mtu:
                self.set_mtu(n, self.mtu)
            if not _pid_alive(n.sshd_pid):
                self.start_sshd(n)
            self.free_disk(n)

    def info(self) -> dict[str, Any]:
        """What a person or script needs to reach the lab."""
        return {
            "id": self.id,
            "name": self.name,
            "ssh_key": self.ssh_key,
            "known_hosts": self.known_hosts,
            "ssh_config": self.ssh_config,
            "nodes": [
                {
                    "name": n.name,
                    "netns": n.netns,
                    "mgmt_ip": n.mgmt_ip,
                    "fabric_ip": n.fabric_ip,
                    "fabric_netdev": n.fabric_netdev,
                    "mtu": n.mtu,
                    "docker_host": n.docker_host,
                    "node_root": n.node_root,
                    "sshd_pid": n.sshd_pid,
                    "dockerd_pid": n.dockerd_pid,
                }
                for n in self.nodes
            ],
        }

    # ---------------------------------------------------------------- down
    def _reap(self, pids: list[int]) -> None:
        for pid in pids:
            proc = self._procs.pop(pid, None)
            if proc is not None:
                with contextlib.suppress(Exception):
                    proc.wait(timeout=5)

    def down(self) -> None:
        """Remove everything the lab made. Idempotent; works after a partial up or a killed owner."""
        if self.id is None:
            return
        for c in self._clients.values():
            with contextlib.suppress(Exception):
                c.close()
        self._clients.clear()
        errors: list[str] = []
        # Everything running in a node: sshd, dockerd, containerd, shims, containers, their children.
        pids: set[int] = set()
        for n in self.nodes:
            pids |= {p for p in (n.sshd_pid, n.dockerd_pid) if p and _pid_alive(p)}
            pids |= set(_netns_pids(n.netns))
            pids |= set(_ns_pids("mnt", n.mnt_ns))
            for f in ("sshd.pid", "docker.pid"):
                with contextlib.suppress(OSError, ValueError):
                    pids.add(int(Path(n.run_dir, f).read_text().strip()))
        pids = {p for p in pids if p != os.getpid()}
        pids |= _descendants(pids)
        _kill_and_wait(sorted(pids))
        self._reap(list(self._procs))
        for n in self.nodes:
            for f in (n.mnt_ns, n.uts_ns):
                if os.path.ismount(f):
                    _run(["umount", "-l", f], check=False)
            if Path(n.netns_path).exists():
                p = _run(["ip", "netns", "del", n.netns], check=False)
                if p.returncode:
                    errors.append(p.stderr.strip())
            if os.path.ismount(n.node_root):
                # Empty it first: a lab created meanwhile may hold a copy of this mount.
                shutil.rmtree(n.node_root + "/", ignore_errors=True)
                _run(["umount", "-l", n.node_root], check=False)
            for kind in ("m", "f"):
                dev = f"sl{self.id}{kind}{n.index}"
                if Path(f"/sys/class/net/{dev}").exists():
                    _run(["ip", "link", "del", dev], check=False)
        for br in (self.mgmt_bridge, self.fabric_bridge):
            if Path(f"/sys/class/net/{br}").exists():
                p = _run(["ip", "link", "del", br], check=False)
                if p.returncode:
                    errors.append(p.stderr.strip())
        _run(["ip", "route", "del", "unreachable", self.fabric_subnet], check=False)
        for rule in self._iptables:
            while _run(["iptables", "-w", "-D", *rule], check=False).returncode == 0:
                pass
        # Unlinking docker data-roots dominates teardown; node dirs go in parallel.
        with ThreadPoolExecutor(max_workers=max(1, len(self.nodes))) as pool:
            list(pool.map(lambda n: _rm_rf(Path(n.data_dir)), self.nodes))
        shutil.rmtree(self.data_dir, ignore_errors=True)
        if self.data_dir.exists():
            errors.append(f"could not remove {self.data_dir}")
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if errors:
            raise LabError(f"lab {self.name} teardown incomplete: " + "; ".join(errors))


# Runs as root inside a fresh mount + UTS namespace (and the node's netns). argv: hostname, node_root,
# data_root, state_root, mount point, scratch dir.
_NODE_SETUP = r"""
import os, subprocess, sys
hostname, node_root, data_root, state_root, mount_point, tmp = sys.argv[1:]
def sh(*argv):
    subprocess.run(argv, check=True)
sh("hostname", hostname)
mounts = [line.split()[1] for line in open("/proc/self/mounts")]
# Drop copies of other namespaces' bind mounts and other labs' disks: they would keep those alive.
for m in sorted(set(mounts), reverse=True):
    if m.startswith(("/run/netns/", data_root + "/", state_root + "/")) and m != node_root:
        subprocess.run(["umount", "-l", m])
# A sysfs of this netns, keeping the submounts (cgroups) dockerd needs: what `ip netns exec` gets wrong.
subs = sorted({m for m in mounts if m.startswith("/sys/")})
top = [m for m in subs if not any(m.startswith(o + "/") for o in subs)]
for i, m in enumerate(top):
    os.makedirs(f"{tmp}/{i}", exist_ok=True)
    sh("mount", "--rbind", m, f"{tmp}/{i}")
sh("umount", "-l", "/sys")
sh("mount", "-t", "sysfs", "sysfs", "/sys")
for i, m in enumerate(top):
    if os.path.isdir(m):
        sh("mount", "--rbind", f"{tmp}/{i}", m)
    subprocess.run(["umount", "-l", f"{tmp}/{i}"])
sh("mount", "--bind", node_root, mount_point)
"""


# -------------------------------------------------------------------- process helpers
def _ns_pids(kind: str, ns_path: str) -> list[int]:
    """Pids whose <kind> namespace is the one bound at ns_path."""
    try:
        target = os.stat(ns_path)
    except OSError:
        return []
    if not os.path.ismount(ns_path):
        return []
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            with contextlib.suppress(OSError):
                st = os.stat(f"/proc/{d}/ns/{kind}")
                if (st.st_ino, st.st_dev) == (target.st_ino, target.st_dev):
                    out.append(int(d))
    return out


def _netns_pids(netns: str) -> list[int]:
    return _ns_pids("net", f"/run/netns/{netns}")


def _rm_rf(path: Path) -> None:
    # rm(1) in its own process: parallel removals do not contend on the GIL.
    if path.exists():
        subprocess.run(["rm", "-rf", "--one-file-system", str(path)], capture_output=True)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _descendants(roots: set[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(") ", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(d))
    out: set[int] = set()
    stack = list(roots)
    while stack:
        for c in children.get(stack.pop(), []):
            if c not in out:
                out.add(c)
                stack.append(c)
    return out


def _kill_and_wait(pids: list[int], timeout: float = 10) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while any(_pid_alive(p) for p in pids) and time.monotonic() < deadline:
        for pid in pids:  # reap our own children so they do not linger as zombies
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.02)


def _ensure_private_mount(path: Path) -> None:
    """ns files can only be bind-mounted under a mount that is not shared (see unshare(1))."""
    best, shared = "", False
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        parts = line.split()
        mnt = parts[4]
        if (str(path) + "/").startswith(mnt.rstrip("/") + "/") and len(mnt) >= len(best):
            best = mnt
            shared = any(p.startswith("shared:") for p in parts[6 : parts.index("-")])
    if shared:
        if best != str(path):
            _run(["mount", "--bind", str(path), str(path)])
        _run(["mount", "--make-private", str(path)])


# -------------------------------------------------------------------- lab registry
@contextlib.contextmanager
def alloc_lock() -> Iterator[None]:
    """Serialises id allocation and orphan reaping across processes."""
    STATE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(STATE_ROOT / "alloc.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def list_labs() -> list[dict[str, Any]]:
    out = []
    if STATE_ROOT.is_dir():
        for p in sorted(STATE_ROOT.glob("*/state.json"), key=lambda p: int(p.parent.name)):
            with contextlib.suppress(OSError, ValueError):
                out.append(json.loads(p.read_text()))
    return out


def owner_alive(state: dict[str, Any]) -> bool:
    pid = state.get("owner_pid")
    if pid is None:
        return True  # persistent (CLI) lab: only an explicit down removes it
    return _pid_alive(pid) and _pid_start(pid) == state.get("owner_start")


def reap_orphans() -> list[str]:
    """Tear down labs whose owning process died (e.g. a pytest run that was killed)."""
    reaped = []
    for state in list_labs():
        if not owner_alive(state):
            with contextlib.suppress(LabError):
                Lab._from_state(state).down()
            reaped.append(state["name"])
    return reaped
