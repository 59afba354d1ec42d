"""Bound a blocking call by wall-clock time. The call runs in a daemon thread: when time is up the
caller moves on (and the process can exit) even if a socket read inside it never returns."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class TimeUp(Exception):
    """The call did not finish before its deadline."""


def bounded(fn: Callable[[], T], until: float) -> T:
    """`fn()` or TimeUp at monotonic time `until`; exceptions raised by `fn` propagate."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread as is
            box["error"] = exc

    worker = threading.Thread(target=target, daemon=True, name="sparkctl-bounded")
    worker.start()
    worker.join(max(0.0, until - time.monotonic()))
    if worker.is_alive():
        raise TimeUp
    if "error" in box:
        raise box["error"]
    return box["value"]
