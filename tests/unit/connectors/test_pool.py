"""connectors/pool.py: NodePool's connectors, and a one-shot command's pool that never asks a
failed node twice (issue 42: status/logs/top --once waited a second connect timeout on it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.connectors import pool as pool_mod
from sparkctl.connectors.pool import NodePool
from sparkctl.errors import ConnectError
from sparkctl.profile import load_profile_file

ROOT = Path(__file__).resolve().parents[3]


class Refusing:
    """A connector whose node never lets it in; counts the attempts."""

    attempts = 0

    def __init__(self, node: str) -> None:
        self.node = node

    def connect(self) -> None:
        Refusing.attempts += 1
        raise ConnectError(f"cannot reach {self.node}: timed out", fix="check the address", node=self.node)

    def close(self) -> None:
        pass


@pytest.fixture
def refusing(monkeypatch: pytest.MonkeyPatch) -> type[Refusing]:
    Refusing.attempts = 0
    monkeypatch.setattr(pool_mod, "connector_for", lambda _p, node, **_k: Refusing(node.name))
    return Refusing


def test_a_one_shot_pool_asks_a_failed_node_once_and_repeats_its_error(refusing: type[Refusing]) -> None:
    prof = load_profile_file(ROOT / "profiles" / "dual-spark.yaml")
    with NodePool(prof, once=True) as pool:
        errors = []
        for _ in range(3):
            with pytest.raises(ConnectError) as err:
                pool.get("spark2")
            errors.append(err.value)
            err.value.message += " (also failed: spark1)"  # what values_or_raise does to its error
    assert refusing.attempts == 1
    assert [e.message for e in errors] == ["cannot reach spark2: timed out (also failed: spark1)"] * 3
    assert all(e.fix == "check the address" and e.node == "spark2" for e in errors)


def test_a_long_lived_pool_keeps_retrying(refusing: type[Refusing]) -> None:
    prof = load_profile_file(ROOT / "profiles" / "dual-spark.yaml")
    with NodePool(prof) as pool:
        for _ in range(2):
            with pytest.raises(ConnectError):
                pool.get("spark2")
    assert refusing.attempts == 2  # supervise's pool: a node that comes back is found again


def test_a_slow_connect_of_the_main_thread_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """`status` resolving rank 0's key connects outside any fan-out: silent for the whole timeout."""
    import time

    from sparkctl import fanout

    class Slow(Refusing):
        def connect(self) -> None:
            time.sleep(0.6)

    said: list[str] = []
    monkeypatch.setattr(fanout, "notice", said.append)
    monkeypatch.setattr(fanout, "SLOW_AFTER_S", 0.2)
    monkeypatch.setattr(pool_mod, "connector_for", lambda _p, node, **_k: Slow(node.name))
    with NodePool(load_profile_file(ROOT / "profiles" / "dual-spark.yaml")) as pool:
        pool.get("spark2")
        assert said == ["still connecting to spark2 (0.2 s)"]
        monkeypatch.setattr(Slow, "connect", lambda self: None)
        pool.get("spark1")  # fast: nothing said
    time.sleep(0.3)
    assert said == ["still connecting to spark2 (0.2 s)"]


def test_a_warm_connect_is_the_one_get_uses_and_a_failed_one_is_not_repeated(
    monkeypatch: pytest.MonkeyPatch, refusing: type[Refusing]
) -> None:
    """`ship` warms the mode's nodes before importing its modules: `get` waits for that connect
    (one connect per node, never two at once) and a node it could not reach raises at once."""
    import threading

    gate = threading.Event()

    class Gated(Refusing):
        connects = 0
        closed = 0
        connected = False

        def connect(self) -> None:  # as SshConnector's: once connected, a no-op
            if self.connected:
                return
            gate.wait(10)
            Gated.connects += 1
            self.connected = self.node != "spark2"
            if self.node == "spark2":
                raise ConnectError(f"cannot reach {self.node}: timed out", node=self.node)

        def close(self) -> None:
            Gated.closed += 1

    monkeypatch.setattr(pool_mod, "connector_for", lambda _p, node, **_k: Gated(node.name))
    prof = load_profile_file(ROOT / "profiles" / "dual-spark.yaml")
    with NodePool(prof) as pool:
        pool.warm(["spark1", "spark2"])
        pool.warm(["spark1"])  # already warming: nothing more
        threading.Timer(0.2, gate.set).start()
        assert pool.get("spark1").node == "spark1"  # waited for the warm connect, did not start one
        with pytest.raises(ConnectError, match="cannot reach spark2"):
            pool.get("spark2")
        with pytest.raises(ConnectError, match="cannot reach spark2"):
            pool.get("spark2")
    assert Gated.connects == 2 and Gated.closed == 2  # each once, with the pool


def test_a_warm_connect_that_ends_after_the_pool_closed_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    gate, done = threading.Event(), threading.Event()

    class Late(Refusing):
        def connect(self) -> None:
            gate.wait(10)

        def close(self) -> None:
            done.set()

    monkeypatch.setattr(pool_mod, "connector_for", lambda _p, node, **_k: Late(node.name))
    with NodePool(load_profile_file(ROOT / "profiles" / "dual-spark.yaml")) as pool:
        pool.warm(["spark2"])
    done.clear()  # closed once with the pool, while it was still connecting
    gate.set()
    assert done.wait(10)  # and again by the warm thread once its connect ended
