"""lifecycle/fleet_gateway.py: the fleet gateway as the runtime starts it (its container, labels,
hash); started and replaced for real in the testbed (test_realengine's fleet test)."""

from __future__ import annotations

import socket
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from sparkctl.errors import SparkctlError
from sparkctl.lifecycle.fleet_gateway import planned_gateway, wait_answering
from sparkctl.profile import load_profile_file, load_profile_text
from tests.http_stub import QuietHandler

ROOT = Path(__file__).resolve().parents[3]
TEXT = (ROOT / "profiles" / "fleet-two-sparks.yaml").read_text()


def test_the_gateway_is_the_fleets_own_container_and_covers_every_service() -> None:
    gw = planned_gateway(load_profile_file(ROOT / "profiles" / "fleet-two-sparks.yaml"))
    c = gw.container
    assert c.container_name == "sparkctl-fleetduo-gateway" and c.node == "spark1"
    assert c.labels["sparkctl.cluster"] == "fleetduo"  # `down` of the fleet finds it, no service's down does
    assert c.options.user == "node" and c.options.read_only and c.gpus == 0
    assert gw.to_json()["services"]["coder"]["names"] == ["qwen2.5-coder-7b"]
    assert gw.url == "http://127.0.0.1:8000"


def test_a_default_mode_change_keeps_the_gateway_a_new_port_replaces_it() -> None:
    before = planned_gateway(load_profile_text(TEXT)).container.labels["sparkctl.config_hash"]
    flipped = TEXT.replace("default: true\n", "\n", 1)  # chat's default mode moves: same routes
    assert planned_gateway(load_profile_text(flipped)).container.labels["sparkctl.config_hash"] == before
    moved = TEXT.replace("models:\n", "gateway: {port: 8100}\nmodels:\n", 1)
    assert planned_gateway(load_profile_text(moved)).container.labels["sparkctl.config_hash"] != before


class _Health(QuietHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.answer(200, b"ok")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_up_waits_until_a_late_gateway_listens() -> None:
    """The CI flake: the container ran, HAProxy did not listen yet, the client was refused."""
    port = _free_port()
    tries: list[int] = []
    server: list[ThreadingHTTPServer] = []

    def running() -> bool:  # the first probes are refused; then the gateway starts listening
        tries.append(1)
        if len(tries) == 3:
            server.append(ThreadingHTTPServer(("127.0.0.1", port), _Health))
            threading.Thread(target=server[0].serve_forever, daemon=True).start()
        return True

    try:
        wait_answering(f"http://127.0.0.1:{port}/health", running, list, "spark1", "gw")
    finally:
        for s in server:
            s.shutdown()
            s.server_close()
    assert len(tries) == 3  # it answered on the probe after the third refusal, not before


def test_a_gateway_that_exits_before_it_answers_names_the_node_and_shows_its_lines() -> None:
    port = _free_port()  # nothing listens there
    with pytest.raises(SparkctlError) as err:
        wait_answering(
            f"http://127.0.0.1:{port}/health",
            lambda: False,
            lambda: ["[ALERT] cannot bind socket [0.0.0.0:8000]"],
            "spark1",
            "the fleet gateway sparkctl-fleetduo-gateway (http://127.0.0.1:8000)",
        )
    text = str(err.value)
    assert text.startswith("[node spark1] the fleet gateway sparkctl-fleetduo-gateway")
    assert "exited before it answered" in text and "cannot bind socket" in text
    assert "preflight" in err.value.fix


def test_a_gateway_that_runs_but_never_answers_gives_up_at_its_bound() -> None:
    port = _free_port()
    now = [0.0]

    def running() -> bool:
        now[0] += 30.0  # each probe costs the fake clock 30 s
        return True

    with pytest.raises(SparkctlError) as err:
        wait_answering(f"http://127.0.0.1:{port}/health", running, list, "spark1", "gw", 60.0, lambda: now[0])
    assert "did not answer /health within 60 s" in str(err.value)
    assert "firewall" in err.value.fix
    assert now[0] == 60.0  # it stopped at the bound, not one probe later
