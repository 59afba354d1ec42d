"""A replica's in-flight count read from its own /metrics: the gauges summed, the key sent, each
failure one line naming the URL with the fix."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from sparkctl.engines.capabilities import MetricNames
from sparkctl.lifecycle.drain import NoInFlightSignal, in_flight
from tests.http_stub import QuietHandler

NAMES = MetricNames(in_flight=("busy",), enable_flag="--enable-metrics")
TEXT = '# TYPE busy gauge\nbusy{endpoint="/v1/chat/completions"} 3.0\nbusy{endpoint="/metrics"} 1.0\n'


class Replica(QuietHandler):
    status = 200
    seen: list[str | None] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        Replica.seen.append(self.headers.get("Authorization"))
        self.answer(Replica.status, TEXT.encode() if Replica.status == 200 else b"no")


@pytest.fixture
def url() -> Iterator[str]:
    Replica.status, Replica.seen = 200, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Replica)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_gauges_are_summed_without_the_scrape_and_the_key_is_sent(url: str) -> None:
    assert in_flight(url, "sk-1", NAMES) == 3
    assert Replica.seen == ["Bearer sk-1"]


def test_an_http_status_names_the_url_and_the_flag_that_serves_metrics(url: str) -> None:
    Replica.status = 404
    with pytest.raises(NoInFlightSignal, match=r"/metrics: HTTP 404\n") as err:
        in_flight(url, None, NAMES)
    assert "--enable-metrics: true" in (err.value.fix or "")


def test_no_answer_names_the_reason() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once closed
    with pytest.raises(NoInFlightSignal, match=f"127.0.0.1:{port}/metrics: .*refused"):
        in_flight(f"http://127.0.0.1:{port}", None, NAMES)
