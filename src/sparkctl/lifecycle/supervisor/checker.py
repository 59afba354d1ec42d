"""The supervisor's checks off its loop's thread: the generation canary and the fabric heartbeat
each run on a thread of their own and post what they find (a cause), waking the loop. A slow
check then never delays another's decision, nor the loop's look at the ranks: measured on the
real engine (issue 41), the loop that ran them in turn waited on a canary hanging to its
deadline on a partitioned pair and acted on the heartbeat's partition 24.5 s after the cut.

The loop owns the decisions (which cause, the restart, the hold); a checker only checks. While
the loop acts on a cause, or a node is unreachable, it pauses every checker; `resume` resets
the check (on the checker's own thread: the check's state is only ever touched there) before
its next round. A result that comes back after a pause (a canary still hanging when the group
was removed) belongs to the old group and is dropped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from sparkctl.connectors.pool import NodePool
from sparkctl.lifecycle import state
from sparkctl.lifecycle.supervisor.canary import Canary
from sparkctl.lifecycle.supervisor.heartbeat import Heartbeat

AFTER_ERROR_S = 1.0  # a check that raised is tried again after this (its own schedule may not move)


class Checker:
    """`check()` whenever `due_in()` (seconds until its next round) is not above 0; a cause it
    returns is posted for the loop (`take`) and sets `wake`, and the checker waits for `resume`."""

    def __init__(
        self,
        name: str,
        check: Callable[[], dict | None],
        due_in: Callable[[], float],
        reset: Callable[[], None],
        wake: threading.Event,
        cluster: str,
    ) -> None:
        self.name, self.cluster, self.wake = name, cluster, wake
        self._check, self._due_in, self._reset = check, due_in, reset
        self._lock = threading.Lock()
        self._poke = threading.Event()  # the state changed (pause, resume, stop): look again
        self._gen = 0  # bumped by pause and resume: a result of an older generation is dropped
        self._active, self._stopped = True, False
        self._cause: dict | None = None
        self._round_gen = 0  # the generation of the round in flight
        self._error = ""
        self._thread = threading.Thread(target=self._run, name=f"check-{name}", daemon=True)

    def start(self) -> Checker:
        self._thread.start()
        return self

    def take(self) -> dict | None:
        """The posted cause, once (None: nothing found)."""
        with self._lock:
            cause, self._cause = self._cause, None
            return cause

    def pause(self) -> None:
        """No new round until `resume`; a posted cause and a round in flight are dropped."""
        with self._lock:
            self._active, self._cause = False, None
            self._gen += 1
            self._poke.set()

    def resume(self) -> None:
        """Rounds again, the check reset first (a new group: its clocks start afresh)."""
        with self._lock:
            self._active = True
            self._gen += 1
            self._poke.set()

    @property
    def paused(self) -> bool:
        return not self._active

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._poke.set()

    def current(self) -> bool:
        """Whether the round in flight still counts (no pause, resume or stop since it began): a
        check asks before it records what it found."""
        with self._lock:
            return not self._stopped and self._active and self._round_gen == self._gen

    def _run(self) -> None:
        done_gen = 0  # the generation the check was last reset for (a new one starts reset)
        while True:
            with self._lock:
                if self._stopped:
                    return
                self._poke.clear()  # under the lock: a change after this wakes the waits below
                gen, active = self._gen, self._active
            if not active:
                self._poke.wait()
                continue
            if gen != done_gen:
                self._reset()
                done_gen = gen
            wait = self._due_in()
            if wait > 0:
                self._poke.wait(wait)
                continue
            self._round_gen = gen
            cause = self._round()
            with self._lock:
                if cause is not None and gen == self._gen and self._active:
                    self._cause, self._active = cause, False  # one cause at a time: the loop acts
                    self.wake.set()

    def _round(self) -> dict | None:
        try:
            return self._check()
        except Exception as exc:  # noqa: BLE001 - a broken check must not end the watching: say so
            why = f"{type(exc).__name__}: {exc}"
            if why != self._error:
                self._error = why
                state.record_event(self.cluster, "check_failed", check=self.name, detail=why[:300])
            self._poke.wait(AFTER_ERROR_S)
            return None


class Checks:
    """The loop's checkers together: the fabric heartbeat (a group on several nodes) and the
    canary (unless `--canary-every 0`), each on its thread, waking `wake` with a cause."""

    def __init__(
        self, pool: NodePool, probe: Canary, beat: Heartbeat, wake: threading.Event, cluster: str
    ) -> None:
        self.by_name: dict[str, Checker] = {}
        if beat.links:
            self.by_name["heartbeat"] = Checker(
                "heartbeat",
                lambda: beat.check(pool, time.monotonic),
                lambda: beat.next_at - time.monotonic(),
                lambda: beat.reset(time.monotonic()),
                wake,
                cluster,
            )
        if probe.policy.canary_every > 0:
            self.by_name["canary"] = Checker(
                "canary", probe.check, lambda: probe.next_at - time.monotonic(), probe.reset, wake, cluster
            )
            probe.live = self.by_name["canary"].current  # a round that outlived a pause or stop says nothing
        self.lost = False  # paused while a node is unreachable

    def start(self) -> Checks:
        for c in self.by_name.values():
            c.start()
        return self

    def stop(self) -> None:
        for c in self.by_name.values():
            c.stop()

    def node_lost(self, lost: bool) -> None:
        """A node unreachable: its silence is no partition, nor a failed canary; the checks
        pause, and resume (reset) once every node answers again."""
        if lost != self.lost:
            self.lost = lost
            if lost:
                self.pause()
            else:
                self.resume()

    def take(self) -> dict[str, dict | None]:
        return {name: c.take() for name, c in self.by_name.items()}

    def pause(self) -> None:
        for c in self.by_name.values():
            c.pause()

    def resume(self) -> None:
        for c in self.by_name.values():
            c.resume()
