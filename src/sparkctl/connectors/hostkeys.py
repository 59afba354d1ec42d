"""Host-key policy: refuse unknown or changed keys unless the user opted in to accept new ones.

Never auto-adds by default (several popular tools do; a changed key is exactly the case to stop).
"""

from __future__ import annotations

import os
from pathlib import Path

import paramiko

from sparkctl.errors import ConnectError


def fingerprint(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {key.fingerprint}"


def known_hosts_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def _keyscan(known_hosts_entry: str) -> str:
    if known_hosts_entry.startswith("["):
        host, _, port = known_hosts_entry[1:].partition("]:")
        return f"ssh-keyscan -p {port} -H {host}"
    return f"ssh-keyscan -H {known_hosts_entry}"


class RefuseUnknown(paramiko.MissingHostKeyPolicy):
    def __init__(self, node: str, known_hosts: Path) -> None:
        self.node = node
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise ConnectError(
            f"unknown SSH host key for {hostname} ({fingerprint(key)}); not in {self.known_hosts}",
            node=self.node,
            fix=f"verify the fingerprint, then `{_keyscan(hostname)} >> {self.known_hosts}`, "
            "or rerun with --accept-new-host-keys (ssh.host_key_policy: accept-new)",
        )


class AcceptNew(paramiko.MissingHostKeyPolicy):
    """Trust-on-first-use, recorded in the profile's known_hosts (changed keys are still refused)."""

    def __init__(self, node: str, known_hosts: Path) -> None:
        self.node = node
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.known_hosts, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a") as fh:
            fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


def changed_key_error(
    node: str, hostname: str, port: int, known_hosts: Path, exc: paramiko.BadHostKeyException
) -> ConnectError:
    name = known_hosts_name(hostname, port)
    return ConnectError(
        f"SSH host key for {name} CHANGED (got {fingerprint(exc.key)}, expected "
        f"{fingerprint(exc.expected_key)}): refusing to connect",
        node=node,
        fix=f"if the node was reinstalled, `ssh-keygen -R '{name}' -f {known_hosts}` and reconnect; "
        "otherwise treat it as an attack",
    )
