"""The IP of each node addressed by name, read on the node itself.

A rank binds `--host` and the router reaches a replica at an address; a name there would have to
resolve inside the container, which may have no mDNS resolver (`spark2.local`) nor the host's
/etc/hosts. So a name becomes the IP the SSH connection to that name landed on (the node's side of
`$SSH_CONNECTION`), else what `getent ahostsv4 NAME` answers on the node.
"""

from __future__ import annotations

from sparkctl.connectors.pool import NodePool
from sparkctl.errors import ConnectError
from sparkctl.fanout import fan_out
from sparkctl.planning.hardening import is_ip
from sparkctl.profile.schema import Profile


def landed_ip(ssh_connection: str) -> str | None:
    """The server address of `$SSH_CONNECTION` (client ip, client port, server ip, server port)."""
    parts = ssh_connection.split()
    return parts[2] if len(parts) == 4 and is_ip(parts[2]) else None


def first_ipv4(getent: str) -> str | None:
    for line in getent.splitlines():
        word = (line.split() or [""])[0]
        if is_ip(word):
            return word
    return None


def node_addresses(profile: Profile, pool: NodePool, nodes: list[str]) -> dict[str, tuple[str, str]]:
    """{node: (IP, where it came from)} for the given nodes that are remote and addressed by name."""
    named = [
        n for n in dict.fromkeys(nodes) if not profile.node(n).is_local and not is_ip(profile.node(n).address)
    ]

    def one(node: str) -> tuple[str, str]:
        address = profile.node(node).address
        conn = pool.get(node)
        res = conn.run(["printenv", "SSH_CONNECTION"], timeout=10)
        ip = landed_ip(res.stdout) if res.rc == 0 else None
        if ip:
            return ip, f"the address the SSH connection to {address} landed on"
        res = conn.run(["getent", "ahostsv4", address], timeout=10)
        ip = first_ipv4(res.stdout) if res.rc == 0 else None
        if ip:
            return ip, f"getent ahostsv4 {address} on {node}"
        raise ConnectError(
            f"cannot tell which IP {address} is on {node} (no $SSH_CONNECTION, getent found nothing)",
            node=node,
            fix=f"set nodes[{node}].address to the node's IP, or engine.host",
        )

    return fan_out(named, one).values_or_raise()
