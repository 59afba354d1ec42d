"""`sparkctl init --ssh-setup`: passwordless SSH to each peer, with the user confirming every step.

Per peer: fetch the host key and show its fingerprint; if known_hosts lacks it, ask, then record it
(a changed key is refused, never replaced); create an ed25519 key pair if there is none; if key
login fails, log in once with a typed password (paramiko; the password is never stored) and
append the public key to ~/.ssh/authorized_keys; finally prove key login works.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import paramiko

from sparkctl.connectors.hostkeys import AcceptNew, fingerprint, known_hosts_name
from sparkctl.connectors.ssh import remote_command
from sparkctl.errors import AuthError, ConnectError, SparkctlError, UsageError

DEFAULT_KEY = "~/.ssh/id_ed25519"
# $1 = the public key line. Idempotent; keeps the modes sshd's StrictModes wants.
INSTALL_SCRIPT = (
    'umask 077; mkdir -p "$HOME/.ssh" && touch "$HOME/.ssh/authorized_keys" && '
    'chmod 700 "$HOME/.ssh" && chmod 600 "$HOME/.ssh/authorized_keys" && '
    '{ grep -qxF "$1" "$HOME/.ssh/authorized_keys" || printf "%s\\n" "$1" >> "$HOME/.ssh/authorized_keys"; }'
)


def fetch_host_key(host: str, port: int, timeout: float) -> paramiko.PKey:
    """The key the server presents (no authentication attempted)."""
    import socket

    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise ConnectError(
            f"cannot reach {host}:{port}: {exc.strerror or exc}",
            node=host,
            fix="check the address and that sshd runs on the peer",
        ) from None
    transport = paramiko.Transport(sock)
    try:
        transport.start_client(timeout=timeout)
        return transport.get_remote_server_key()
    except paramiko.SSHException as exc:
        raise ConnectError(f"SSH handshake with {host}:{port} failed: {exc}", node=host) from None
    finally:
        transport.close()


def known_key(known_hosts: Path, host: str, port: int) -> dict[str, paramiko.PKey]:
    """Keys recorded for host:port, by key type."""
    if not known_hosts.is_file():
        return {}
    keys = paramiko.HostKeys(str(known_hosts))
    return dict(keys.lookup(known_hosts_name(host, port)) or {})


def record_host_key(known_hosts: Path, host: str, port: int, key: paramiko.PKey) -> None:
    """Append to known_hosts (the same writer the accept-new policy uses)."""
    AcceptNew(host, known_hosts).missing_host_key(paramiko.SSHClient(), known_hosts_name(host, port), key)


def ensure_key_pair(path: Path, comment: str) -> tuple[str, bool]:
    """The public key line for `path`, creating an unencrypted ed25519 pair (0600) when absent."""
    pub = Path(f"{path}.pub")
    if path.exists():
        if pub.exists():
            return pub.read_text().strip(), False
        key = paramiko.PKey.from_path(str(path))
        return f"{key.get_name()} {key.get_base64()} {comment}", False
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    line = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    text = f"{line.decode()} {comment}"
    pub.write_text(text + "\n")
    return text, True


def install_key(
    host: str, port: int, user: str, password: str, known_hosts: Path, pubkey: str, timeout: float
) -> None:
    """Log in with the password once (host key must already be known) and append the public key."""
    client = paramiko.SSHClient()
    client.load_host_keys(str(known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        client.connect(
            host,
            port=port,
            username=user,
            password=password,
            timeout=timeout,
            allow_agent=False,
            look_for_keys=False,
            banner_timeout=timeout,
            auth_timeout=timeout,
        )
    except paramiko.AuthenticationException:
        raise ConnectError(
            f"password login as {user}@{host}:{port} failed",
            node=host,
            fix="check the user and password (and that sshd allows PasswordAuthentication)",
        ) from None
    except (paramiko.SSHException, OSError) as exc:
        raise ConnectError(f"SSH to {user}@{host}:{port} failed: {exc}", node=host) from None
    try:
        # The transport is the one place an argv becomes a string.
        _, stdout, stderr = client.exec_command(
            remote_command(["sh", "-c", INSTALL_SCRIPT, "sparkctl", pubkey])
        )
        rc = stdout.channel.recv_exit_status()
        if rc:
            err = stderr.read().decode(errors="replace").strip()
            raise SparkctlError(f"installing the key on {host} failed (exit {rc}): {err}", node=host)
    finally:
        client.close()


def key_login_works(host: str, port: int, user: str, key: Path, known_hosts: Path, timeout: float) -> bool:
    from sparkctl.connectors.ssh import SshConnector, resolve_target

    target = resolve_target(
        host,
        host,
        user=user,
        port=port,
        key=str(key),
        default_user=None,
        default_port=22,
        default_key=None,
        known_hosts=str(known_hosts),
        accept_new=False,
        connect_timeout=timeout,
    )
    try:
        with SshConnector(target) as conn:
            return conn.run(["true"], timeout=timeout).ok
    except AuthError:
        return False  # only a refused key means "install it"; unreachable/unknown key stay errors


def setup_peers(
    targets: list[tuple[str, str | None, int | None]],
    *,
    ssh_user: str | None,
    ssh_key: str | None,
    known_hosts: str,
    timeout: float,
    prompt: Callable[[str, bool], str],  # (text, hide input) -> answer: the CLI's prompt
    confirm: Callable[[str], bool],
    say: Callable[[str], object] = print,
) -> None:
    import getpass

    if not targets:
        raise UsageError("--ssh-setup needs the peers: --peer HOST (or --node HOST)")
    kh = Path(known_hosts).expanduser()
    key_path = Path(ssh_key or DEFAULT_KEY).expanduser()
    for host, user, port in targets:
        port = port or 22
        user = user or ssh_user or getpass.getuser()
        presented = fetch_host_key(host, port, timeout)
        recorded = known_key(kh, host, port)
        name = known_hosts_name(host, port)
        if presented.get_name() in recorded:
            if recorded[presented.get_name()] != presented:
                raise ConnectError(
                    f"SSH host key for {name} CHANGED (now {fingerprint(presented)}): refusing",
                    node=host,
                    fix=f"if {host} was reinstalled: `ssh-keygen -R '{name}' -f {kh}`, then rerun",
                )
            say(f"{name}: host key {fingerprint(presented)} already in {kh}")
        else:
            say(f"{name} presents host key {fingerprint(presented)}")
            if not confirm(f"Is this {host}'s key (compare with `ssh-keygen -lf` on {host}) and trust it?"):
                raise UsageError(f"host key of {name} not confirmed; nothing changed")
            record_host_key(kh, host, port, presented)
            say(f"recorded it in {kh}")
        pubkey, created = ensure_key_pair(key_path, f"sparkctl@{os.uname().nodename}")
        if created:
            say(f"created key pair {key_path} (ed25519)")
        if key_login_works(host, port, user, key_path, kh, timeout):
            say(f"{user}@{name}: key login already works")
            continue
        password = prompt(f"Password for {user}@{name} (used once, not stored)", True)
        install_key(host, port, user, password, kh, pubkey, timeout)
        del password
        if not key_login_works(host, port, user, key_path, kh, timeout):
            raise ConnectError(
                f"key installed on {host} but key login still fails",
                node=host,
                fix=f"check sshd's AuthorizedKeysFile and PubkeyAuthentication on {host}",
            )
        say(f"{user}@{name}: passwordless SSH works with {key_path}")
