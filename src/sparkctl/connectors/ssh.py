"""SSH connector (paramiko): verified host keys, ~/.ssh/config, one connection per node per run."""

from __future__ import annotations

import base64
import contextlib
import errno
import logging
import os
import re
import select
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkctl.connectors._paramiko import paramiko, ssh_config_lookup
from sparkctl.connectors.base import DEFAULT_TIMEOUT, Connector, RunResult
from sparkctl.connectors.hostkeys import AcceptNew, RefuseUnknown, changed_key_error
from sparkctl.errors import AuthError, ConnectError

if TYPE_CHECKING:
    import docker

# paramiko logs its transport thread's failures (a traceback for a missing banner) through the
# logging module; without a handler Python prints them to stderr. We report them ourselves.
if not os.environ.get("SPARKCTL_DEBUG"):
    logging.getLogger("paramiko").addHandler(logging.NullHandler())

# A constant script; the path arguments arrive as positional parameters, never interpolated.
_PUT_SCRIPT = 'mkdir -p "$(dirname "$3")" && cat > "$1" && chmod "$2" "$1" && mv -f "$1" "$3"'


# The login shell (bash, dash, fish, tcsh...) parses the command string sshd hands it; so the
# string holds only /bin/sh, one constant script in single quotes (no backslash or quote inside:
# literal in every shell) and one word per argument made of [A-Za-z0-9_./:=,+-] (r + the word) or
# base64 (b + data). /bin/sh decodes each into "$@" and execs it: no shell ever parses an argument.
_DECODE = (
    'n=$#; for a; do case $a in r*) v=${a#r};; *) v=$(printf %s "${a#b}" | base64 -d; echo .); '
    'v=${v%.};; esac; set -- "$@" "$v"; done; shift $n; exec "$@"'
)
_PLAIN_RE = re.compile(r"^[A-Za-z0-9_./:=,+-]+$")
_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)  # Linux only


def remote_command(argv: Sequence[str]) -> str:
    """argv -> the one string an SSH exec request carries, independent of the login shell."""
    words = [f"r{a}" if _PLAIN_RE.fullmatch(a) else "b" + base64.b64encode(a.encode()).decode() for a in argv]
    return " ".join(["/bin/sh", "-c", f"'{_DECODE}'", "sparkctl", *words])


@dataclass(frozen=True)
class SshTarget:
    node: str
    host: str
    port: int
    user: str | None
    key_files: tuple[str, ...]
    known_hosts: Path
    accept_new: bool
    connect_timeout: float


def resolve_target(
    node: str,
    address: str,
    *,
    user: str | None,
    port: int | None,
    key: str | None,
    default_user: str | None,
    default_port: int,
    default_key: str | None,
    known_hosts: str,
    accept_new: bool,
    connect_timeout: float,
    ssh_config: Path | None = None,
) -> SshTarget:
    """Profile node values win, then ~/.ssh/config for that host, then the profile's ssh defaults."""
    conf: dict = {}
    cfg_path = ssh_config or Path("~/.ssh/config").expanduser()
    if cfg_path.is_file():
        conf = ssh_config_lookup(str(cfg_path), address)
    host = conf.get("hostname", address)
    keys = [key] if key else [*conf.get("identityfile", [])] or ([default_key] if default_key else [])
    return SshTarget(
        node=node,
        host=host,
        port=port or int(conf.get("port", default_port)),
        user=user or conf.get("user") or default_user,
        key_files=tuple(str(Path(k).expanduser()) for k in keys if k),
        known_hosts=Path(known_hosts).expanduser(),
        accept_new=accept_new,
        connect_timeout=connect_timeout,
    )


class _QuickAck:
    """The socket, ACKing every segment at once. sshd leaves Nagle on for exec sessions, so a reply
    that follows an unacknowledged one (the channel-open confirmation after auth's debug message, a
    result line after output) waits for our ACK, which Linux delays by 40 ms: measured in the
    testbed, every command cost ~45 ms instead of ~3 ms. TCP_QUICKACK is not sticky: set per recv."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def recv(self, n: int) -> bytes:
        self._sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
        return self._sock.recv(n)

    def __getattr__(self, name: str) -> object:
        return getattr(self._sock, name)


def _gcm_first_transport(sock: socket.socket, **kwargs: object) -> paramiko.Transport:
    """Prefer AES-GCM: ~1.6x paramiko's bulk throughput vs its aes-ctr default (measured here, 316 ->
    506 MB/s), which is what image and weight shipping run at. Servers without GCM still negotiate.
    No Nagle, no delayed ACK: every message here is small and someone waits for its answer."""
    with contextlib.suppress(OSError, AttributeError):  # not TCP (a proxy command's socket)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if _QUICKACK is not None:
            sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
            sock = _QuickAck(sock)  # type: ignore[assignment]
    transport = paramiko.Transport(sock, **kwargs)  # type: ignore[arg-type]
    options = transport.get_security_options()
    options.ciphers = tuple(sorted(options.ciphers, key=lambda c: 0 if "-gcm@" in c else 1))
    return transport


def handshake_error(t: SshTarget, where: str, exc: Exception) -> ConnectError:
    """TCP connected but SSH did not start: most often the port is not sshd, or sshd is stuck."""
    text = str(exc)
    if "banner" in text.lower() or "no existing session" in text.lower():
        return ConnectError(
            f"{where} accepts TCP connections but sent no SSH banner within {t.connect_timeout:g}s",
            node=t.node,
            fix=f"check that port {t.port} on {t.host} is sshd (`ssh -v -p {t.port} {t.host}`) and "
            "that sshd is not overloaded (MaxStartups); fix nodes[].port if it is another service",
        )
    return ConnectError(
        f"SSH handshake with {where} failed: {text}",
        node=t.node,
        fix=f"run `ssh -v -p {t.port} {t.host}` to see where the handshake stops",
    )


class SshProcess:
    def __init__(self, chan: paramiko.Channel) -> None:
        self._chan = chan
        self.stdin = chan.makefile_stdin("wb")
        self.stdout = chan.makefile("rb")
        self._stderr = chan.makefile_stderr("rb")

    def close_stdin(self) -> None:
        self.stdin.flush()
        self._chan.shutdown_write()

    def wait(self, timeout: float | None = None) -> int:
        if not self._chan.status_event.wait(timeout):
            raise TimeoutError("remote command did not finish in time")
        return self._chan.recv_exit_status()

    def read_stderr(self) -> str:
        return self._stderr.read().decode(errors="replace")

    def kill(self) -> None:
        self._chan.close()


class SshConnector(Connector):
    def __init__(self, target: SshTarget) -> None:
        super().__init__(target.node)
        self.target = target
        self._client: paramiko.SSHClient | None = None

    @property
    def description(self) -> str:
        t = self.target
        return f"{t.user + '@' if t.user else ''}{t.host}:{t.port}"

    # -- connection -------------------------------------------------------------------------
    def connect(self) -> SshConnector:
        if self._client is not None:
            return self
        t = self.target
        client = paramiko.SSHClient()
        if t.known_hosts.is_file():
            client.get_host_keys().load(str(t.known_hosts))
        policy = AcceptNew if t.accept_new else RefuseUnknown
        client.set_missing_host_key_policy(policy(t.node, t.known_hosts))
        try:
            client.connect(
                t.host,
                port=t.port,
                username=t.user,
                key_filename=list(t.key_files) or None,
                timeout=t.connect_timeout,
                banner_timeout=t.connect_timeout,
                auth_timeout=t.connect_timeout,
                allow_agent=True,
                look_for_keys=not t.key_files,
                transport_factory=_gcm_first_transport,
            )
        except ConnectError:
            client.close()
            raise
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise changed_key_error(t.node, t.host, t.port, t.known_hosts, exc) from None
        except paramiko.AuthenticationException:
            client.close()
            raise AuthError(
                f"SSH authentication failed for {self.description} (passwordless login required)",
                node=t.node,
                fix=f"install your key: `ssh-copy-id -p {t.port} {self.description.rsplit(':', 1)[0]}` "
                "or `sparkctl init --ssh-setup`; set nodes[].key if it is not a default key",
            ) from None
        except TimeoutError:
            client.close()
            raise ConnectError(
                f"SSH to {self.description} timed out after {t.connect_timeout:g}s (host unreachable?)",
                node=t.node,
                fix="check the address, cabling and that the node is up",
            ) from None
        except paramiko.ssh_exception.NoValidConnectionsError as exc:
            client.close()
            codes = {getattr(e, "errno", None) for e in exc.errors.values()}
            if errno.ECONNREFUSED in codes:
                raise ConnectError(
                    f"SSH connection refused by {self.description} (sshd not running?)",
                    node=t.node,
                    fix=f"start sshd on {t.node} or fix nodes[].port",
                ) from None
            raise ConnectError(
                f"cannot reach {self.description}: {exc}",
                node=t.node,
                fix="check the address and routing to the node",
            ) from None
        except OSError as exc:
            client.close()
            raise ConnectError(
                f"cannot reach {self.description}: {exc.strerror or exc}",
                node=t.node,
                fix="check the address and routing to the node",
            ) from None
        except paramiko.SSHException as exc:
            client.close()
            raise handshake_error(t, self.description, exc) from None
        transport = client.get_transport()
        assert transport is not None
        transport.set_keepalive(15)
        self._client = client
        return self

    @property
    def client(self) -> paramiko.SSHClient:
        return self.connect()._client  # type: ignore[return-value]

    def _session(self) -> paramiko.Channel:
        transport = self.client.get_transport()
        if transport is None or not transport.is_active():
            self.close()  # drops the dead client and the Docker client bound to it, then reconnects
            transport = self.client.get_transport()
        assert transport is not None
        try:
            return transport.open_session(timeout=self.target.connect_timeout)
        except paramiko.SSHException as exc:
            raise ConnectError(
                f"cannot open an SSH channel to {self.description}: {exc}",
                node=self.node,
                fix="check sshd's MaxSessions and that the node is up",
            ) from None

    def close(self) -> None:
        super().close()
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- commands ---------------------------------------------------------------------------
    def _exec(
        self, argv: Sequence[str], timeout: float | None, input: bytes | None
    ) -> tuple[int, bytes, bytes]:
        chan = self._session()
        chan.exec_command(remote_command(argv))  # the only place argv becomes a string
        if input:
            chan.sendall(input)
        chan.shutdown_write()
        deadline = time.monotonic() + timeout if timeout else None
        out, err = bytearray(), bytearray()
        # Woken by the channel itself (its fileno is readable on output, stderr or EOF): no polling,
        # the answer is read the moment it lands.
        while not (chan.eof_received or chan.closed) or chan.recv_ready() or chan.recv_stderr_ready():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and (left <= 0 or not select.select([chan], [], [], left)[0]):
                chan.close()
                return 124, bytes(out), bytes(err) + f"timed out after {timeout:g}s".encode()
            if left is None:
                select.select([chan], [], [])
            while chan.recv_ready():
                out += chan.recv(1 << 16)
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(1 << 16)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not chan.status_event.wait(left):
            chan.close()
            return 124, bytes(out), bytes(err) + f"timed out after {timeout:g}s".encode()
        rc = chan.recv_exit_status()
        chan.close()
        return rc, bytes(out), bytes(err)

    def run(
        self, argv: Sequence[str], *, timeout: float | None = DEFAULT_TIMEOUT, input: bytes | None = None
    ) -> RunResult:
        rc, out, err = self._exec(argv, timeout, input)
        return RunResult(
            self.node, tuple(argv), rc, out.decode(errors="replace"), err.decode(errors="replace")
        )

    def stream(self, argv: Sequence[str], *, timeout: float | None = None) -> Iterator[str]:
        chan = self._session()
        chan.set_combine_stderr(True)
        chan.exec_command(remote_command(argv))
        if timeout:
            chan.settimeout(timeout)
        try:
            for line in chan.makefile("r"):
                yield line.rstrip("\n")
        finally:
            chan.close()

    def popen(self, argv: Sequence[str]) -> SshProcess:
        chan = self._session()
        chan.exec_command(remote_command(argv))
        return SshProcess(chan)

    def put(self, data: bytes, path: str, mode: int = 0o644) -> None:
        tmp = f"{path}.sparkctl-tmp"
        self.run(
            ["sh", "-c", _PUT_SCRIPT, "sparkctl-put", tmp, f"{mode:o}", path], input=data, timeout=None
        ).check(f"writing {path}")

    def get(self, path: str) -> bytes:
        rc, out, err = self._exec(["cat", "--", path], DEFAULT_TIMEOUT, None)
        if rc:
            raise FileNotFoundError(f"{self.node}:{path}: {err.decode(errors='replace').strip()}")
        return out

    def _make_docker(self) -> docker.DockerClient:
        from sparkctl.connectors.docker_ssh import docker_over_ssh

        return docker_over_ssh(self.client, self.node)
