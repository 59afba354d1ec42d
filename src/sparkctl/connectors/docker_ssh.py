"""Docker SDK over *our* verified SSH connection, via `docker system dial-stdio` on the node.

docker-py's own ssh:// transport opens a second, separately configured connection; reusing the
paramiko client we already verified keeps one host-key policy and one connection per node.
"""

from __future__ import annotations

import docker
import paramiko
from docker.transport.basehttpadapter import BaseHTTPAdapter
from docker.transport.sshconn import SSHHTTPAdapter

from sparkctl.errors import ConnectError

API_VERSION_FLOOR = "1.41"  # Docker 20.10; only used to bootstrap version negotiation


class _SharedClientAdapter(SSHHTTPAdapter):
    """SSHHTTPAdapter that uses an already-connected paramiko client and never closes it."""

    def __init__(
        self, client: paramiko.SSHClient, node: str, timeout: int = 60, max_pool_size: int = 10
    ) -> None:
        import urllib3

        self.node = node
        self.ssh_client = client
        self.ssh_host = "sparkctl-node"
        self.ssh_params = {}
        self.timeout = timeout
        self.max_pool_size = max_pool_size
        self.pools = urllib3._collections.RecentlyUsedContainer(10, dispose_func=lambda p: p.close())
        BaseHTTPAdapter.__init__(self)

    def _connect(self) -> None:  # the connector owns the connection
        pass

    def get_connection(self, url, proxies=None):  # requests.adapters API
        # With our client closed, docker-py would fall back to running the system `ssh` to a host
        # named after ssh_host: say the connection is gone instead (a connection loss, exit 5).
        transport = self.ssh_client.get_transport()
        if transport is None or not transport.is_active():
            raise ConnectError(
                f"the SSH connection to node {self.node} is closed",
                node=self.node,
                fix=f"check that {self.node} is up and its sshd answers",
            )
        return super().get_connection(url, proxies)

    def close(self) -> None:
        self.pools.clear()


def docker_over_ssh(client: paramiko.SSHClient, node: str, timeout: int = 120) -> docker.DockerClient:
    dc = docker.DockerClient(
        base_url="unix:///var/run/docker.sock", version=API_VERSION_FLOOR, timeout=timeout
    )
    api = dc.api
    adapter = _SharedClientAdapter(client, node, timeout=timeout)
    api.close()
    api.mount("http+docker://ssh", adapter)
    api._custom_adapter = adapter
    api.base_url = "http+docker://ssh"
    try:
        api._version = api._retrieve_server_version()
    except Exception as exc:  # noqa: BLE001 - any failure here means "no usable engine"
        raise ConnectError(
            f"Docker engine not reachable over SSH: {exc}",
            node=node,
            fix="install Docker on the node, add the SSH user to the docker group, "
            "and check `docker version` works in a plain SSH session",
        ) from None
    return dc
