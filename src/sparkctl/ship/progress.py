"""Progress of transfers: bytes, rate and ETA per peer and item. Thread-safe; rendering is separate."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol


class Progress(Protocol):
    def start(self, key: str, description: str, total: int | None) -> None: ...
    def advance(self, key: str, n: int) -> None: ...
    def finish(self, key: str, note: str) -> None: ...


class NullProgress:
    def start(self, key: str, description: str, total: int | None) -> None:
        pass

    def advance(self, key: str, n: int) -> None:
        pass

    def finish(self, key: str, note: str) -> None:
        pass


@dataclass
class ByteCounter:
    """Records bytes per key (tests, benchmarks and the JSON report read it)."""

    sent: dict[str, int] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def start(self, key: str, description: str, total: int | None) -> None:
        with self._lock:
            self.sent.setdefault(key, 0)

    def advance(self, key: str, n: int) -> None:
        with self._lock:
            self.sent[key] = self.sent.get(key, 0) + n

    def finish(self, key: str, note: str) -> None:
        with self._lock:
            self.notes[key] = note


class PlainProgress:
    """Not a terminal (piped, CI): a plain line per item at start, every `every` seconds, and at the end."""

    def __init__(self, console, every: float = 10.0) -> None:  # rich Console
        import time

        self._out, self._every, self._clock = console, every, time.monotonic
        self._items: dict[str, list] = {}  # key -> [description, total, done, started, last printed]
        self._lock = threading.Lock()

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def _say(self, text: str) -> None:
        from rich.markup import escape

        self._out.print(escape(text), soft_wrap=True)

    def start(self, key: str, description: str, total: int | None) -> None:
        from sparkctl.units import human_bytes

        now = self._clock()
        with self._lock:
            self._items[key] = [description, total, 0, now, now]
        self._say(f"{description}: {human_bytes(total)} to send" if total else f"{description}: started")

    def advance(self, key: str, n: int) -> None:
        from sparkctl.units import human_bytes

        now = self._clock()
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return
            item[2] += n
            if now - item[4] < self._every:
                return
            item[4] = now
            desc, total, done, t0 = item[0], item[1], item[2], item[3]
        pct = f" ({min(done / total, 1.0):.0%})" if total else ""
        rate = human_bytes(done / max(now - t0, 1e-6))
        self._say(f"{desc}: {human_bytes(done)}{pct} at {rate}/s")

    def finish(self, key: str, note: str) -> None:
        from sparkctl.units import human_bytes

        with self._lock:
            item = self._items.get(key)
        if item is not None:
            secs = self._clock() - item[3]
            self._say(f"{item[0]}: {note or 'done'} ({human_bytes(item[2])} in {secs:.1f}s)")


def make_progress(console):  # rich Console -> RichProgress | PlainProgress
    """Live bars on a terminal, periodic plain lines otherwise (no squashed frame in a log)."""
    return RichProgress(console) if console is not None and console.is_terminal else PlainProgress(console)


class FanOut:
    """One byte stream feeding several peers: each peer's bar advances with it."""

    def __init__(self, progress: Progress, nodes: list[str], what: str) -> None:
        self.progress, self.keys = progress, [f"{n}:{what}" for n in nodes]

    def start(self, key: str, description: str, total: int | None) -> None:
        pass

    def advance(self, key: str, n: int) -> None:
        for k in self.keys:
            self.progress.advance(k, n)

    def finish(self, key: str, note: str) -> None:
        pass


class RichProgress:
    """A rich live display: one bar per (peer, item) with bytes, rate and ETA."""

    def __init__(self, console=None) -> None:  # rich Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )
        from rich.progress import Progress as _Rich

        self._rich = _Rich(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(binary_units=True),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[note]}"),
            console=console,
            transient=False,
        )
        self._tasks: dict[str, int] = {}
        self._done: dict[str, int] = {}
        self._totals: dict[str, int | None] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> RichProgress:
        self._rich.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._rich.stop()

    def start(self, key: str, description: str, total: int | None) -> None:
        with self._lock:
            if key in self._tasks:  # started again (e.g. the image resent whole): reuse its row
                self._rich.reset(self._tasks[key], total=total, description=description)
            else:
                self._tasks[key] = self._rich.add_task(description, total=total, note="")
            self._done[key] = 0
            self._totals[key] = total

    def advance(self, key: str, n: int) -> None:
        task = self._tasks.get(key)
        if task is not None:
            self._done[key] += n
            total = self._totals.get(key)  # an estimate (tar headers): never show 48/46 MiB
            if total is not None and self._done[key] > total:
                self._totals[key] = self._done[key]
                self._rich.update(task, total=self._done[key])
            self._rich.advance(task, n)

    def finish(self, key: str, note: str) -> None:
        task = self._tasks.get(key)
        if task is not None:
            done = max(self._done.get(key, 0), 1)  # a full bar, also for "nothing to send"
            self._rich.update(task, total=done, completed=done, note=note)
