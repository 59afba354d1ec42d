"""Readiness probes: the served-name check where the models answer carries it (an engine's own
endpoint), not where it cannot (sglang-router before vLLM workers lists "unknown")."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sparkctl.engines import get_engine
from sparkctl.planning.build import build_plan
from sparkctl.planning.model import Endpoint
from sparkctl.planning.router import READINESS as ROUTER_READINESS
from sparkctl.profile import load_profile_file
from sparkctl.runtime.readiness import probe

ROOT = Path(__file__).resolve().parents[3]
# What sglang-router 0.3.2 answers before vLLM workers (measured: tests/testbed_tests/
# test_realengine_ops.py), and with no worker at all.
ROUTER_BEFORE_VLLM = {"object": "list", "data": [{"id": "unknown", "object": "model", "owned_by": "local"}]}


@pytest.fixture
def server() -> Iterator[tuple[str, dict]]:
    """A local HTTP server answering {path: (status, body)} from the returned dict."""
    answers: dict[str, tuple[int, object]] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            code, body = answers.get(self.path, (404, {"detail": "Not Found"}))
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{httpd.server_address[1]}", answers
    httpd.shutdown()


def _endpoint(where: str, readiness) -> Endpoint:
    host, port = where.split(":")
    return Endpoint(host=host, port=int(port), served_model_name="tiny", api_key=None, readiness=readiness)


def test_the_router_before_vllm_workers_is_ready_though_it_lists_unknown(server) -> None:
    where, answers = server
    answers.update({"/v1/models": (200, ROUTER_BEFORE_VLLM), "/health": (200, "OK")})
    health = probe(_endpoint(where, ROUTER_READINESS))
    assert health.ready, health.detail
    # An engine's own endpoint listing another name is still not ready: the name check stays there.
    replica = probe(_endpoint(where, get_engine("vllm").readiness))
    assert not replica.ready and replica.detail == "/v1/models lists ['unknown'], not tiny"


def test_a_router_with_no_worker_is_not_ready(server) -> None:
    where, answers = server
    answers.update({"/v1/models": (503, "No models available"), "/health": (200, "OK")})
    health = probe(_endpoint(where, ROUTER_READINESS))
    assert not health.ready and health.detail == "/v1/models: HTTP 503"


def test_a_replica_mode_probes_its_router_without_the_name_check(monkeypatch) -> None:
    monkeypatch.setenv("SPARKCTL_API_KEY", "sk-test")
    plan = build_plan(load_profile_file(ROOT / "profiles" / "vllm-dual-spark.yaml"), "dp2")
    assert plan.endpoint.readiness == ROUTER_READINESS and not ROUTER_READINESS.names_served
    assert all(g.endpoint.readiness.names_served for g in plan.groups)


def test_the_prober_repeats_a_refused_connect_fast_and_wakes_its_waiter_when_ready(server) -> None:
    from sparkctl.runtime.readiness import EndpointHealth, Prober

    where, answers = server
    vllm = get_engine("vllm").readiness
    woken = threading.Event()
    prober = Prober(_endpoint(where, vllm), on_ready=woken)
    refused = EndpointHealth(detail="/v1/models: [Errno 111] Connection refused")
    answering = EndpointHealth(detail="/v1/models: HTTP 503")
    loading = EndpointHealth(True, ["tiny"], False, "/health: HTTP 503 (warming up)")
    assert prober.pause(refused) == prober.closed_interval < prober.interval
    assert prober.pause(answering) == prober.pause(loading) == prober.interval  # no access-log flood
    answers["/v1/models"] = (200, {"data": [{"id": "tiny"}]})
    answers["/health"] = (200, "")
    prober.start()
    assert woken.wait(30) and prober.ready_at is not None and prober.state.ready
    prober.stop()
