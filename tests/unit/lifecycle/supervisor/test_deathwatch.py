"""Rank death from Docker's event stream (lifecycle/supervisor/deathwatch.py): a `die` of the
cluster's container, any exit code (0 included), wakes the supervisor and is kept with Docker's
time of it; other clusters' and other events are not."""

from __future__ import annotations

import threading
import time

from sparkctl.lifecycle.supervisor.deathwatch import DeathWatch


class _Api:
    def __init__(self, events: list[dict]) -> None:
        self.events_list = events
        self.asked: list[dict] = []

    def events(self, **kw):  # noqa: ANN003 - the SDK's events(since, decode, filters)
        self.asked.append(kw)
        return iter(self.events_list)


class _Conn:
    def __init__(self, api: _Api) -> None:
        self.api = api

    def docker(self):  # noqa: ANN201
        return self


class _Pool:
    def __init__(self, api: _Api) -> None:
        self.conn = _Conn(api)

    def get(self, node: str) -> _Conn:
        return self.conn


def _die(name: str, code: str, cluster: str = "c1", at: float | None = None) -> dict:
    at = time.time() if at is None else at
    attrs = {"name": name, "exitCode": code, "sparkctl.cluster": cluster}
    return {
        "Type": "container",
        "Action": "die",
        "Actor": {"Attributes": attrs},
        "time": int(at),
        "timeNano": int(at * 1e9),
    }


def test_an_exit_of_any_code_wakes_the_supervisor_with_its_time() -> None:
    wake = threading.Event()
    w = DeathWatch(_Pool(_Api([])), "c1", ["a"], wake)
    w.seen({**_die("other", "1", cluster="c2")})  # another cluster's
    w.seen({**_die("r0", "0"), "Action": "start"})  # not a death
    assert not wake.is_set() and w.exits == {}
    w.seen(_die("c1-tp2-r0", "0", at=time.time() - 2.0))  # rank 0 exits 0 when its worker died
    assert wake.is_set() and w.exits["c1-tp2-r0"][1] == 0
    assert w.since_exit("c1-tp2-r0") >= 2.0  # from Docker's time of the exit, not when we read it
    assert w.since_exit("never-died") is None


def test_each_node_is_followed_from_now_for_this_clusters_deaths() -> None:
    api, wake = _Api([_die("c1-tp2-r1", "137")]), threading.Event()
    w = DeathWatch(_Pool(api), "c1", ["a", "b", "a"], wake).start()
    try:
        assert wake.wait(10)
    finally:
        w.stop()
    assert len(w.threads) == 2  # one per node
    kw = api.asked[0]
    assert kw["decode"] is True and kw["filters"] == {
        "type": "container",
        "event": "die",
        "label": "sparkctl.cluster=c1",
    }
    assert w.exits["c1-tp2-r1"][1] == 137
