"""The fleet's supervisor process (`sparkctl supervise` of a fleet, `--detach` in the background):
its liveness flock under the fleet's name, so `supervise --stop` and `down` find it, and the
on-demand loop (supervisor/on_demand.py) with `up` and `down` of one service as its two verbs."""

from __future__ import annotations

import os
from collections.abc import Callable

from sparkctl.connectors.pool import NodePool
from sparkctl.lifecycle.down import down
from sparkctl.lifecycle.fleet_gateway import planned_gateway
from sparkctl.lifecycle.fleet_status import operator_key
from sparkctl.lifecycle.supervisor.on_demand import run_fleet
from sparkctl.lifecycle.supervisor.process import StopFlag, hold
from sparkctl.lifecycle.up import up
from sparkctl.planning.fleet_view import service_view
from sparkctl.profile.schema import Profile

ROLE = "on-demand"  # the record's mode: what `status` and `supervise --stop` name


def supervise(profile: Profile, say: Callable[[str], None]) -> int:
    fd = hold(profile.cluster, ROLE)
    flag = StopFlag().install()

    def start(name: str) -> None:
        view = service_view(profile, name)
        with NodePool(view) as pool:
            up(view, pool)

    def stop(name: str) -> None:
        view = service_view(profile, name)
        with NodePool(view, once=True) as pool:
            down(view, pool)

    url = planned_gateway(profile).url
    say(f"fleet {profile.cluster}: on-demand services start on a request at {url}/v1")
    try:
        return run_fleet(profile, flag, start, stop, url, operator_key(profile), say)
    finally:
        os.close(fd)
