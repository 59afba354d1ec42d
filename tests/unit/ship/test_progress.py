"""Transfer progress when not a terminal (piped, CI logs): plain periodic lines, never past 100 %."""

from __future__ import annotations

import io

from rich.console import Console

from sparkctl.ship.progress import PlainProgress, RichProgress, make_progress


def piped() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=80, force_terminal=False, color_system=None, _environ={}), buf


def test_not_a_terminal_gets_plain_periodic_lines() -> None:
    out, buf = piped()
    progress = make_progress(out)
    assert isinstance(progress, PlainProgress)
    now = [100.0]
    progress._clock = lambda: now[0]  # a controlled clock: no sleeping
    with progress:
        progress.start("a", "spark2 image", 46 * 2**20)
        for _ in range(10):  # 48 MiB for an estimated 46 MiB, one chunk per 3 s
            now[0] += 3
            progress.advance("a", int(4.8 * 2**20))
        progress.finish("a", "shipped")
    lines = buf.getvalue().splitlines()
    assert lines[0] == "spark2 image: 46.0 MiB to send"
    periodic = lines[1:-1]
    assert len(periodic) == 2  # every 10 s, not per chunk
    assert all("%" in ln and int(ln.split("(")[1].split("%")[0]) <= 100 for ln in periodic), periodic
    assert lines[-1] == "spark2 image: shipped (48.0 MiB in 30.0s)"
    assert "\r" not in buf.getvalue() and "\x1b" not in buf.getvalue()


def test_live_bar_raises_its_total_instead_of_overshooting() -> None:
    out = Console(file=io.StringIO(), width=80, force_terminal=True)
    progress = RichProgress(out)
    progress.start("a", "spark2 image", 100)
    progress.advance("a", 80)
    progress.advance("a", 40)
    (task,) = progress._rich.tasks
    assert task.completed == 120 and task.total == 120
