"""`sparkctl supervise` of a fleet: start an on-demand service on its first request, stop it when
idle (docs/fleet.md "On demand").

The fleet gateway holds a request for a stopped on-demand service (up to gateway.wait_s) and
counts it as waiting; this loop, on the controller, polls the gateway's state each second. A
service with a waiting request and no loaded mode is started in its default mode, through the same
`up` as by hand (admission first), under the fleet's lock and its own. If its nodes' budgets do not
leave room, the least recently used idle on-demand services are stopped first, never a pinned one;
if that cannot make room, it is not started and the gateway answers 503 with Retry-After when the
wait runs out. A loaded on-demand service whose last request is `idle_stop` old is stopped cleanly
(`down`: drain, stop, settle on unified memory). Each start and stop is an event of the service.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sparkctl.clients.fleet import ServiceView, fleet_state
from sparkctl.errors import SparkctlError
from sparkctl.lifecycle import state
from sparkctl.lifecycle.lock import ClusterLock
from sparkctl.lifecycle.supervisor.process import StopFlag
from sparkctl.planning.fleet import build_fleet, parse_selection
from sparkctl.planning.fleet_view import fleet_lock_name, service_view
from sparkctl.profile.schema import Profile

POLL_S = 1.0
RETRY_S = 30.0  # after a failed or refused start, the next try (its waiting requests get 503 meanwhile)


@dataclass(frozen=True)
class Action:
    verb: str  # "start" | "stop"
    service: str
    why: str
    evict: tuple[str, ...] = ()  # on-demand services stopped first to make room


def idle_s(seen: ServiceView, started_at: float | None, now: float) -> float:
    """Seconds without a request: since the last one, else since this loop started the service."""
    if seen.last_request_age_s is not None:
        return seen.last_request_age_s
    return now - started_at if started_at is not None else 0.0


def decide(
    profile: Profile, seen: dict[str, ServiceView], started: dict[str, float], now: float
) -> list[Action]:
    """What to do now, from the gateway's view (pure)."""
    out = []
    loaded = {n for n, s in seen.items() if s.loaded}
    for name, svc in profile.models.items():
        s = seen.get(name)
        if not svc.on_demand or s is None:
            continue
        if s.waiting and not s.loaded:
            evict = make_room(profile, name, loaded, seen)
            if evict is None:
                out.append(Action("refuse", name, f"{s.waiting} request(s) wait; no room on its nodes"))
            else:
                out.append(Action("start", name, f"{s.waiting} request(s) wait", tuple(evict)))
        elif s.loaded and svc.idle_stop is not None:
            idle = idle_s(s, started.get(name), now)
            if idle >= svc.idle_stop:
                out.append(Action("stop", name, f"no request for {idle:.0f} s (idle_stop {svc.idle_stop} s)"))
    return out


def make_room(
    profile: Profile, name: str, loaded: set[str], seen: dict[str, ServiceView]
) -> list[str] | None:
    """The on-demand services to stop (least recently used first) so that `name` fits beside what is
    loaded; [] when it fits already; None when only stopping a pinned service would do."""
    modes = parse_selection(profile, None)
    order = sorted(
        (n for n in loaded if profile.models[n].on_demand and n != name and not seen[n].waiting),
        key=lambda n: -(seen[n].last_request_age_s or 0.0),
    )
    stopped: list[str] = []
    while True:
        keep = {n: modes[n] for n in [*sorted(loaded - set(stopped) - {name}), name]}
        if not build_fleet(profile, keep).over:
            return stopped
        if not order:
            return None
        stopped.append(order.pop(0))


def run_fleet(
    profile: Profile,
    flag: StopFlag,
    start: Callable[[str], None],
    stop: Callable[[str], None],
    url: str,
    key: str | None,
    say: Callable[[str], None],
) -> int:
    """The loop, until `flag` (SIGTERM, `supervise --stop`, `down`). `start`/`stop`: one service."""
    started: dict[str, float] = {}  # service -> when this loop started it
    failed: dict[str, float] = {}  # service -> when its start last failed (retried after RETRY_S)
    said = ""
    while not flag.set:
        try:
            seen = fleet_state(url, key)
        except SparkctlError as exc:
            if exc.message != said:
                say(f"waiting for the fleet gateway: {exc.message}")
                said = exc.message
            flag.nap(POLL_S)
            continue
        said = ""
        now = time.time()
        for act in decide(profile, seen, started, now):
            if act.verb in ("start", "refuse") and now - failed.get(act.service, 0.0) < RETRY_S:
                continue
            if not _act(profile, act, start, stop, started, say):
                failed[act.service] = time.time()
        flag.nap(POLL_S)
    return 0


def _act(profile, act: Action, start, stop, started: dict[str, float], say) -> bool:
    cluster = service_view(profile, act.service).cluster
    if act.verb == "refuse":
        say(f"{act.service}: not started: {act.why}")
        state.record_event(cluster, "on-demand-refused", why=act.why)
        return False
    try:
        with ClusterLock(
            fleet_lock_name(profile), f"sparkctl supervise (on-demand {act.verb} of {act.service})"
        ):
            for other in act.evict:
                say(f"{other}: stopping to make room for {act.service}")
                stop(other)
                state.record_event(
                    service_view(profile, other).cluster, "evicted", why=f"room for {act.service}"
                )
            say(f"{act.service}: {act.verb} ({act.why})")
            (start if act.verb == "start" else stop)(act.service)
    except SparkctlError as exc:
        say(f"{act.service}: {act.verb} failed: {exc.message}")
        state.record_event(cluster, f"on-demand-{act.verb}-failed", why=exc.message)
        return False
    if act.verb == "start":
        started[act.service] = time.time()
    else:
        started.pop(act.service, None)
    state.record_event(cluster, "on-demand-start" if act.verb == "start" else "idle-stop", why=act.why)
    return True
