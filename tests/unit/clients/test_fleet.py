"""clients/fleet.py: the fleet gateway's /sparkctl/fleet-state parsed, asked of a real loopback
server (what it was sent is recorded), its failures one SparkctlError naming the URL and why."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from sparkctl.clients.fleet import ROUTE, ServiceView, fleet_state, parse_state
from sparkctl.errors import SparkctlError
from tests.http_stub import QuietHandler

FULL = {
    "services": {
        "chat": {"loaded": True, "waiting": 0, "requests": 7, "last_request_age_s": 12.5, "on_demand": False},
        "coder": {
            "loaded": False,
            "waiting": 2,
            "requests": 3,
            "last_request_age_s": None,
            "on_demand": True,
        },
    }
}


def test_a_full_document_gives_each_services_view() -> None:
    views = parse_state(FULL)
    assert views == {
        "chat": ServiceView("chat", loaded=True, waiting=0, requests=7, last_request_age_s=12.5),
        "coder": ServiceView("coder", loaded=False, waiting=2, requests=3, on_demand=True),
    }


def test_missing_fields_are_not_loaded_nothing_waiting_and_no_request_yet() -> None:
    views = parse_state({"services": {"chat": {}, "coder": {"waiting": None, "last_request_age_s": 3}}})
    assert views["chat"] == ServiceView("chat", loaded=False)
    assert views["coder"].waiting == 0 and views["coder"].last_request_age_s == 3.0
    assert isinstance(views["coder"].last_request_age_s, float)
    assert parse_state({}) == {} and parse_state({"services": None}) == {}


class _Gateway(QuietHandler):
    code = 200
    body = json.dumps(FULL).encode()
    seen: list[tuple[str, str | None]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        target = self.requestline.split()[1]  # as sent (http.server folds a leading // in .path)
        type(self).seen.append((target, self.headers.get("Authorization")))
        self.answer(type(self).code, type(self).body, {"Content-Type": "application/json"})


@pytest.fixture
def gateway():
    _Gateway.code, _Gateway.body, _Gateway.seen = 200, json.dumps(FULL).encode(), []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Gateway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_state_is_asked_with_the_operator_key_and_parsed(gateway: str) -> None:
    views = fleet_state(gateway + "/", "sk-op-1")  # a trailing slash: one route, not //
    assert _Gateway.seen == [(ROUTE, "Bearer sk-op-1")]
    assert views["coder"].waiting == 2 and views["chat"].loaded


def test_no_key_sends_no_authorization_header(gateway: str) -> None:
    fleet_state(gateway, None)
    assert _Gateway.seen == [(ROUTE, None)]


def test_a_refused_key_is_an_error_naming_the_url_and_the_status(gateway: str) -> None:
    _Gateway.code, _Gateway.body = 403, b'{"error": "forbidden"}'
    with pytest.raises(SparkctlError) as err:
        fleet_state(gateway, "sk-user")
    assert err.value.message == f"the fleet gateway at {gateway} gave no state (HTTP 403)"
    assert "sparkctl up" in (err.value.fix or "")


def test_a_body_that_is_not_json_is_an_error_naming_the_url(gateway: str) -> None:
    _Gateway.body = b"<html>hello</html>"
    with pytest.raises(SparkctlError) as err:
        fleet_state(gateway, "sk-op-1")
    assert err.value.message.startswith(f"the fleet gateway at {gateway} gave no state (not its JSON")


@pytest.mark.parametrize("body", [b"[1, 2]", b'{"services": {"chat": 5}}', b'{"services": [1]}'])
def test_json_of_another_shape_is_an_error_not_a_crash(gateway: str, body: bytes) -> None:
    _Gateway.body = body
    with pytest.raises(SparkctlError) as err:
        fleet_state(gateway, "sk-op-1")
    assert "not its JSON" in err.value.message and gateway in err.value.message


def test_no_server_is_an_error_naming_the_url() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Gateway)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    server.server_close()  # the port is free: nothing answers
    with pytest.raises(SparkctlError) as err:
        fleet_state(url, "sk-op-1", timeout=2.0)
    assert err.value.message.startswith(f"the fleet gateway at {url} gave no state (")
    assert "HTTP" not in err.value.message
