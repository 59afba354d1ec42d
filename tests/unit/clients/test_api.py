"""The /v1/models probe of verify and bench has a short timeout of its own."""

from __future__ import annotations

import socket
import threading

import pytest

from sparkctl.clients import api as client
from sparkctl.errors import ConnectError


def test_a_port_that_accepts_but_never_answers_fails_on_the_metadata_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client, "METADATA_TIMEOUT_S", 0.5)  # the cap, not the 60 s generation timeout
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)  # accepts (kernel backlog), never reads or answers
    url = f"http://127.0.0.1:{srv.getsockname()[1]}"
    out: dict[str, BaseException] = {}

    def run() -> None:
        try:
            client.probe(url, "m", None, timeout_s=600.0)
        except BaseException as exc:  # noqa: BLE001 - handed to the assertions
            out["exc"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(60)  # a guard against waiting the generation timeout (600 s), not a speed assertion
    srv.close()
    assert not t.is_alive(), "the probe waited the generation timeout"
    exc = out["exc"]
    assert isinstance(exc, ConnectError) and "no reply within 0.5s" in exc.message
