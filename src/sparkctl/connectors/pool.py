"""One connector per node per run, opened lazily, used from parallel workers.

`NodePool.map` fans out with `sparkctl.fanout.fan_out`: a `Results` of per-node `Outcome`s, so
one node's failure never hides another's; the caller picks the policy (`values_or_raise()` for
all-must-succeed, `.ok`/`.errors` to collect).
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from sparkctl import fanout
from sparkctl.connectors.base import Connector
from sparkctl.errors import SparkctlError
from sparkctl.fanout import CancelToken, Results, fan_out
from sparkctl.profile.schema import Node, Profile

T = TypeVar("T")


def connector_for(profile: Profile, node: Node, *, accept_new_host_keys: bool = False) -> Connector:
    ssh = profile.ssh
    return connector_to(
        node.name,
        node.address,
        local=node.is_local,
        user=node.user,
        port=node.port,
        key=node.key,
        default_user=ssh.user,
        default_port=ssh.port,
        default_key=ssh.key,
        known_hosts=ssh.known_hosts,
        accept_new=accept_new_host_keys or ssh.host_key_policy == "accept-new",
        connect_timeout=ssh.connect_timeout,
    )


def connector_to(name: str, address: str, *, local: bool = False, **ssh: Any) -> Connector:
    """The one connector factory (profiles and `init` alike): this machine, or SSH with
    `connectors.ssh.resolve_target`'s keyword arguments. Not connected yet."""
    if local:
        from sparkctl.connectors.local import LocalConnector

        return LocalConnector(name)
    from sparkctl.connectors.ssh import SshConnector, resolve_target

    return SshConnector(resolve_target(name, address, **ssh))


def _say_if_slow(text: str) -> threading.Timer | None:
    """A connect of the main thread (a fan-out's workers have the fan-out's own line) that takes
    over fanout.SLOW_AFTER_S says so through fanout.notice; the caller cancels it when done."""
    if fanout.notice is None or threading.current_thread() is not threading.main_thread():
        return None
    timer = threading.Timer(fanout.SLOW_AFTER_S, fanout.notice, [f"{text} ({fanout.SLOW_AFTER_S:g} s)"])
    timer.daemon = True
    timer.start()
    return timer


class NodePool:
    """Lazily connected connectors for a profile's nodes; closes them all on exit.

    `once`: a one-shot command's pool (status, logs, down, preflight...): a node whose connect
    failed fails again at once with the same error, never asked a second time (a node that takes
    its connect timeout to fail cost it twice). Long-lived pools (supervise) keep retrying."""

    def __init__(self, profile: Profile, *, accept_new_host_keys: bool = False, once: bool = False) -> None:
        self.profile = profile
        self.accept_new_host_keys = accept_new_host_keys
        self.once = once
        self._connectors: dict[str, Connector] = {}
        self._failed: dict[str, SparkctlError] = {}
        self._warming: dict[str, threading.Thread] = {}
        self._closed = False
        self._lock = threading.Lock()

    def warm(self, nodes: Iterable[str]) -> None:
        """Start connecting to `nodes` now, in the background, so that what the caller imports and
        reads meanwhile overlaps the handshakes (a re-ship: the ship modules load while the nodes'
        sshd answer). For a one-shot command: a node whose warm connect failed raises that error
        from its next `get`, never a second connect timeout."""
        for node in nodes:
            with self._lock:
                if node in self._warming or node in self._connectors:
                    continue
                thread = threading.Thread(target=self._warm_one, args=(node,), daemon=True)
                self._warming[node] = thread
            thread.start()

    def _warm_one(self, node: str) -> None:
        try:
            conn = self._connect(node)
            if self._closed:  # the command ended while this connected: nobody will close it
                conn.close()
        except SparkctlError as exc:
            with self._lock:
                self._failed.setdefault(node, copy.copy(exc))
        except Exception:  # noqa: BLE001 - anything else: the next `get` connects again and raises it
            pass

    def get(self, node: str) -> Connector:
        """The node's connector, connected (raises ConnectError naming the node)."""
        warming = self._warming.get(node)
        if warming is not None and warming is not threading.current_thread():
            warming.join()
        return self._connect(node)

    def _connect(self, node: str) -> Connector:
        with self._lock:
            if node in self._failed:
                raise copy.copy(self._failed[node])  # a copy: callers add to an error's message
            conn = self._connectors.get(node)
            if conn is None:
                conn = connector_for(
                    self.profile, self.profile.node(node), accept_new_host_keys=self.accept_new_host_keys
                )
                self._connectors[node] = conn
        connect = getattr(conn, "connect", None)
        if connect is not None:
            slow = _say_if_slow(f"still connecting to {node}")
            try:
                connect()
            except SparkctlError as exc:
                if self.once:
                    with self._lock:
                        self._failed.setdefault(node, copy.copy(exc))
                raise
            finally:
                if slow is not None:
                    slow.cancel()
        return conn

    def map(
        self, nodes: Iterable[str], fn: Callable[[Connector], T], *, cancel: CancelToken | None = None
    ) -> Results[str, T]:
        """Run fn(connector) on every node in parallel; connect errors are per-node outcomes."""
        return fan_out(nodes, lambda n: fn(self.get(n)), cancel=cancel)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self._connectors = list(self._connectors.values()), {}
        for conn in conns:
            with contextlib.suppress(Exception):  # closing is best effort
                conn.close()

    def __enter__(self) -> NodePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
