"""Run one function per node (or rank) in parallel and get one result type back.

`fan_out` returns `Results`: an `Outcome` per key (value or error, with the node/rank it ran
for), so one node's failure never hides another's. The caller picks the policy:

- all must succeed: `results.values_or_raise()` raises the first failure (in submission order)
  as a `SparkctlError` that names its node and rank, and lists the other failures;
- collect: iterate `results`, or read `results.ok` / `results.errors`.

Ctrl-C: workers run on daemon threads and the caller waits in short slices, so a
KeyboardInterrupt reaches the caller at once; the shared `CancelToken` is set so that long
operations (transfers, polls) stop at their next check, and nobody waits for a blocked worker.

A wait longer than SLOW_AFTER_S says what it waits on through `notice` (the CLI prints it on
stderr), then every SLOW_EVERY_S: a node that accepts TCP but never answers SSH was silence.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from sparkctl.errors import SparkctlError

K = TypeVar("K")
T = TypeVar("T")

Where = Callable[[object], "tuple[str | None, int | None]"]

# Where a slow fan-out says what it still waits for (the CLI sets a stderr line; None: silent).
notice: Callable[[str], None] | None = None
SLOW_AFTER_S, SLOW_EVERY_S = 2.0, 5.0


class Cancelled(SparkctlError):
    """The run was cancelled (Ctrl-C or a sibling's failure); raised by `CancelToken.check`."""


class CancelToken:
    """Set once; long-running work calls `check()` (or reads `cancelled`) between steps."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set():
            raise Cancelled("cancelled")

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`; True if cancelled meanwhile (an interruptible sleep)."""
        return self._event.wait(seconds)


@dataclass(frozen=True)
class Outcome(Generic[K, T]):
    key: K
    value: T | None = None
    error: BaseException | None = None
    node: str | None = None
    rank: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def as_error(self) -> SparkctlError:
        """The failure as a SparkctlError naming node and rank (a bug keeps its cause chained)."""
        exc = self.error
        if isinstance(exc, SparkctlError):
            if exc.node is None and self.node is not None:
                exc.node = self.node
            if exc.rank is None and self.rank is not None:
                exc.rank = self.rank
            return exc
        wrapped = SparkctlError(f"{type(exc).__name__}: {exc}", node=self.node, rank=self.rank)
        wrapped.__cause__ = exc
        return wrapped


class Results(Mapping[K, Outcome[K, T]]):
    """Outcomes in submission order."""

    def __init__(self, outcomes: Iterable[Outcome[K, T]]) -> None:
        self._outcomes = {o.key: o for o in outcomes}

    def __getitem__(self, key: K) -> Outcome[K, T]:
        return self._outcomes[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._outcomes)

    def __len__(self) -> int:
        return len(self._outcomes)

    @property
    def ok(self) -> dict[K, T]:
        return {k: o.value for k, o in self._outcomes.items() if o.ok}  # type: ignore[misc]

    @property
    def errors(self) -> dict[K, BaseException]:
        return {k: o.error for k, o in self._outcomes.items() if o.error is not None}

    @property
    def failed(self) -> list[Outcome[K, T]]:
        return [o for o in self._outcomes.values() if not o.ok]

    @property
    def all_ok(self) -> bool:
        return not self.failed

    def values_or_raise(self) -> dict[K, T]:
        """All must succeed: every value, or the first failure raised (others named in it)."""
        failed = self.failed
        if not failed:
            return self.ok
        first = failed[0]
        if first.error is not None and not isinstance(first.error, Exception):
            raise first.error  # KeyboardInterrupt/SystemExit inside a worker pass as they are
        err = first.as_error()
        if len(failed) > 1:
            others = ", ".join(_where(o) for o in failed[1:])
            if "(also failed:" not in err.message:
                err.message += f" (also failed: {others})"
                err.args = (err.message,)
        raise err


def _where(o: Outcome) -> str:
    parts = [f"node {o.node}" if o.node else None, f"rank {o.rank}" if o.rank is not None else None]
    return " ".join(p for p in parts if p) or str(o.key)


def _default_where(key: object) -> tuple[str | None, int | None]:
    if isinstance(key, str):
        return key, None
    if isinstance(key, int) and not isinstance(key, bool):
        return None, key
    return None, None


def fan_out(
    keys: Iterable[K],
    fn: Callable[[K], T],
    *,
    max_workers: int = 16,
    where: Callable[[K], tuple[str | None, int | None]] | None = None,
    cancel: CancelToken | None = None,
) -> Results[K, T]:
    """fn(key) for every key in parallel; returns when all are done.

    `where(key) -> (node, rank)` names each outcome (default: a str key is a node, an int a
    rank). On Ctrl-C the token is cancelled and KeyboardInterrupt re-raised at once. A key given
    twice runs once (results are keyed: a duplicate must never wait for a second answer).
    """
    keys = list(dict.fromkeys(keys))
    locate = where or _default_where
    token = cancel or CancelToken()
    done: queue.Queue[Outcome[K, T]] = queue.Queue()
    todo: queue.Queue[K] = queue.Queue()
    for key in keys:
        todo.put(key)

    def worker() -> None:
        while not token.cancelled:
            try:
                key = todo.get_nowait()
            except queue.Empty:
                return
            node, rank = locate(key)
            try:
                done.put(Outcome(key, value=fn(key), node=node, rank=rank))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's policy
                done.put(Outcome(key, error=exc, node=node, rank=rank))

    for _ in range(min(max_workers, len(keys))):
        # daemon: a worker blocked in I/O must never keep Ctrl-C (or the interpreter) waiting
        threading.Thread(target=worker, daemon=True, name="sparkctl-fanout").start()
    got: dict[K, Outcome[K, T]] = {}
    # Only the main thread's fan-out speaks: a worker's own fan-out is part of its wait, and a
    # background loop (the supervisor's checks) has its own reporting.
    outer = threading.current_thread() is threading.main_thread()
    start = time.monotonic()
    say_at = start + SLOW_AFTER_S
    try:
        while len(got) < len(keys):
            try:
                outcome = done.get(timeout=0.1)
            except queue.Empty:
                if outer and notice is not None and time.monotonic() >= say_at:
                    notice(_waiting([k for k in keys if k not in got], len(keys), time.monotonic() - start))
                    say_at = time.monotonic() + SLOW_EVERY_S
                continue
            got[outcome.key] = outcome
    except BaseException:
        token.cancel()
        raise
    return Results(got[k] for k in keys)


def _waiting(pending: list, total: int, elapsed: float) -> str:
    """`still waiting for spark2 (5 s)`: the nodes by name; other keys (ranks, groups) counted."""
    nodes = [k for k in pending if isinstance(k, str)]
    what = ", ".join(nodes) if len(nodes) == len(pending) else f"{len(pending)} of {total} answers"
    return f"still waiting for {what} ({elapsed:.0f} s)"
