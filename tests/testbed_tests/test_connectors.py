"""The SSH connector against a real sshd: argv in, bytes out, errors that name the node."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from sparkctl.connectors.ssh import SshConnector, resolve_target
from sparkctl.errors import ConnectError
from tests.testbed.lab import NODE_MOUNT

pytestmark = pytest.mark.testbed


def connector(lab, node: str = "spark2", **kw) -> SshConnector:
    n = lab.node(node)
    args = dict(
        user="root",
        port=n.ssh_port,
        key=lab.ssh_key,
        default_user=None,
        default_port=22,
        default_key=None,
        known_hosts=lab.known_hosts,
        accept_new=False,
        connect_timeout=5,
    )
    args.update(kw)
    return SshConnector(resolve_target(node, n.mgmt_ip, **args))


def test_run_quotes_only_at_the_transport(lab):
    with connector(lab) as conn:
        res = conn.run(["printf", "%s|", "a b", "$HOME", "; rm -rf /", "`id`"])
        assert res.ok and res.stdout == "a b|$HOME|; rm -rf /|`id`|"
        assert conn.run(["hostname"]).stdout.strip() == "spark2"
        res = conn.run(["sh", "-c", "cat; echo err >&2; exit 7"], input=b"in")
        assert (res.rc, res.stdout, res.stderr) == (7, "in", "err\n")
        assert conn.run(["sleep", "10"], timeout=0.5).rc == 124


def test_put_get_stream_popen_and_docker(lab):
    with connector(lab) as conn:
        path = f"{NODE_MOUNT}/connector-test/dir/file.bin"
        data = bytes(range(256)) * 4096
        conn.put(data, path, mode=0o600)
        assert conn.get(path) == data
        assert conn.run(["stat", "-c", "%a", path]).stdout.strip() == "600"
        assert list(conn.stream(["sh", "-c", "echo one; echo two"])) == ["one", "two"]
        proc = conn.popen(["sha256sum"])
        proc.stdin.write(data)
        proc.close_stdin()
        assert proc.stdout.read().split()[0].decode() == hashlib.sha256(data).hexdigest()
        assert proc.wait(10) == 0
        # Docker over the same verified SSH connection reaches spark2's own engine.
        info = conn.docker().info()
        assert info["Name"] == "spark2"
        # Bulk transfers run on AES-GCM when the server has it (paramiko's fastest cipher).
        assert "gcm" in conn.client.get_transport().remote_cipher
        conn.run(["rm", "-rf", f"{NODE_MOUNT}/connector-test"]).check()


def test_connect_errors_are_distinct_and_name_the_node(lab, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(ConnectError, match="unknown SSH host key") as err:
        connector(lab, known_hosts=str(empty)).connect()
    assert err.value.node == "spark2" and "ssh-keyscan" in err.value.fix
    other = tmp_path / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    with pytest.raises(ConnectError, match="authentication failed") as err:
        connector(lab, key=str(other)).connect()
    assert err.value.node == "spark2"
    with pytest.raises(ConnectError, match="refused") as err:
        connector(lab, port=2).connect()
    assert err.value.node == "spark2"


def test_no_nagle_no_delayed_ack_and_output_larger_than_the_window(lab):
    """sshd keeps Nagle on for exec sessions: without TCP_NODELAY and TCP_QUICKACK on our side every
    command waits ~40 ms for a delayed ACK. Both streams are read as they come (no deadlock when
    stderr alone outgrows the channel window while stdout is still open)."""
    import socket

    with connector(lab) as conn:
        sock = conn.client.get_transport().sock
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        assert type(sock).__name__ == "_QuickAck"
        res = conn.run(["sh", "-c", "head -c 3000000 /dev/zero >&2; head -c 3000000 /dev/zero; exit 3"])
        assert (res.rc, len(res.stdout), len(res.stderr)) == (3, 3000000, 3000000)


def test_ssh_config_match_exec_still_works(tmp_path):
    """paramiko is imported without `invoke` (half its import time); a `Match exec` line brings it back."""
    import subprocess
    import sys

    cfg = tmp_path / "config"
    cfg.write_text(
        'Match exec "false"\n  HostName no.example\nMatch exec "true"\n  HostName yes.example\n  Port 2222\n'
    )
    code = (
        "import sys; from pathlib import Path; import sparkctl.connectors.ssh as s; "
        "assert 'invoke' not in sys.modules; "
        "t = s.resolve_target('n', 'a', user=None, port=None, key=None, default_user=None, default_port=22, "
        "default_key=None, known_hosts='/dev/null', accept_new=False, connect_timeout=5, "
        "ssh_config=Path(sys.argv[1])); print(t.host, t.port)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(cfg)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["yes.example", "2222"]
