"""top/snapshot.py: reading an engine's /metrics through the cluster's one HTTP opener."""

from __future__ import annotations

import http.server
import threading

import pytest

from sparkctl.top.snapshot import ScrapeError, scrape
from tests.http_stub import QuietHandler


def test_a_scrape_failure_says_what_failed_through_the_one_opener() -> None:
    class NotFound(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.answer(404 if self.path == "/metrics" else 200, b"ok")

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(ScrapeError, match=r"HTTP 404 \(set engine.args enable-metrics: true\)"):
            scrape(f"{base}/metrics", enable_flag="enable-metrics")
        with pytest.raises(ScrapeError, match="^/metrics: HTTP 404$"):
            scrape(f"{base}/metrics")
        assert scrape(f"{base}/other") == "ok"
    finally:
        server.shutdown()
    with pytest.raises(ScrapeError, match="^/metrics: "):
        scrape(f"{base}/metrics", timeout=1)  # nothing listens now
