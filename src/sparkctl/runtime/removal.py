"""Stopping and removing one of sparkctl's containers, and the gateway that served its API.

A removal Docker already has in progress (another `down`, a rollback, the supervisor, or the
rank's own removal taking its gateway) answers 409: that is not an error, the container is
going; wait until it is gone so the caller's next step (a start on the same name) does not race it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sparkctl.planning.gateway import gateway_container_name
from sparkctl.runtime.secret_files import drop_secrets

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector

STOP_GRACE = 5  # seconds between SIGTERM and SIGKILL on stop (profile: engine.stop_grace)
GONE_POLL_S = 0.1
GONE_POLLS = 100  # 10 s: Docker's own removal of a stopped container takes well under a second


def remove(conn: Connector, name: str, grace: int | None = STOP_GRACE) -> bool:
    """Stop (SIGTERM, then SIGKILL after `grace` s) and remove, then the gateway that served its
    API (after it: streams in flight end with the engine's own answer); `grace=None` kills at once
    (a failed start: there is nothing to save). False when it did not exist."""
    existed = _remove_one(conn, name, grace)
    drop_secrets(conn, name)
    if not name.endswith(gateway_container_name("")):  # `name` is not a gateway itself
        gateway = gateway_container_name(name)
        if _remove_one(conn, gateway, grace=None):
            drop_secrets(conn, gateway)
    return existed


def _remove_one(conn: Connector, name: str, grace: int | None) -> bool:
    import docker.errors

    api = conn.docker().api  # as few round trips as possible: `down` and rollback are on the clock
    try:
        if grace is not None:
            api.stop(name, timeout=grace)  # a stopped container answers 304: fine
        api.remove_container(name, force=True)  # force: SIGKILL if still running
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as exc:
        if not _removal_in_progress(exc):
            raise
        _wait_gone(conn, name)
    return True


def _removal_in_progress(exc: Exception) -> bool:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return status == 409 and "in progress" in str(exc)


def _wait_gone(conn: Connector, name: str) -> None:
    import docker.errors

    for _ in range(GONE_POLLS):
        try:
            conn.docker().api.inspect_container(name)
        except docker.errors.NotFound:
            return
        time.sleep(GONE_POLL_S)
