"""Starting a rank's or the router's filtering front on its node (runtime/front.py): a port the
front cannot take is one error naming the node (and the rank, never for the router) with a fix."""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

import pytest

from sparkctl.connectors.local import LocalConnector
from sparkctl.errors import SparkctlError
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file
from sparkctl.runtime import front

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def busy_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.fixture
def quick_bind(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = front.front_config
    monkeypatch.setattr(front, "front_config", lambda *a: {**plain(*a), "bind_retry_s": 0.2})


@pytest.mark.parametrize("role", ["rank", "router"])
def test_a_busy_port_names_the_node_the_rank_and_the_fix(role, busy_port, quick_bind, monkeypatch) -> None:
    monkeypatch.setenv("HOME", "/home/spark")
    plan = build_plan(load_profile_file(ROOT / "profiles/two-gpu-box.yaml"), "dp2")
    spec = plan.router if role == "router" else plan.ranks[1]
    assert spec is not None and spec.front is not None
    spec = replace(spec, front=replace(spec.front, listen="127.0.0.1", port=busy_port))
    with pytest.raises(SparkctlError) as err:
        front.start_front(LocalConnector(spec.node), spec, "c0ffee")
    e = err.value
    assert e.node == spec.node and f"cannot listen on 127.0.0.1:{busy_port}" in e.message
    assert e.fix is not None and f"free port {busy_port} on {spec.node}" in e.fix
    if role == "router":
        assert e.rank is None and e.message.startswith("the router's filtering front")
    else:
        assert e.rank == 1 and e.message.startswith("the API's filtering front")
