"""`top`'s screen: engine lines, one row per rank, degraded cells explained, warnings. Fits 80 columns."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from sparkctl.top.metrics import EngineStats
    from sparkctl.top.nodes import GpuStat
    from sparkctl.top.snapshot import EngineRow, NodeView, RankRow, Snapshot

DASH = "-"


def _num(v: float | None, fmt: str = "{:.0f}", suffix: str = "") -> str:
    return DASH if v is None else fmt.format(v) + suffix


def _ms(v: float | None) -> str:
    if v is None:
        return DASH
    return f"{v * 1000:.1f}ms" if v < 0.1 else (f"{v * 1000:.0f}ms" if v < 1 else f"{v:.2f}s")


def _bytes(v: float | None) -> str:
    """Bytes (or bytes/s) in 4 characters or so: 512, 1.2K, 34M, 1.1G."""
    if v is None:
        return DASH
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if v >= scale:
            x = v / scale
            return f"{x:.1f}{unit}" if x < 10 else f"{x:.0f}{unit}"
    return f"{v:.0f}"


def _pcts(p: dict[str, float | None]) -> str:
    return " ".join(f"{k} {_ms(p.get(k))}" for k in ("p50", "p90", "p99")) if p else DASH


def engine_lines(e: EngineRow) -> list[str]:
    head = f"[bold]engine {escape(e.name)}[/] {escape(e.url)}"
    if e.error is not None or e.stats is None:
        return [head, f"  [red]unavailable[/]: {escape(e.error or 'no data')}"]
    s: EngineStats = e.stats
    kv_color = "red" if (s.token_usage or 0) > 0.95 else "default"
    spec = DASH
    if s.accept_length is not None:
        spec = f"{s.accept_length:.2f} tok/step" + (
            f" ({s.accept_rate:.0%})" if s.accept_rate is not None else ""
        )
    return [
        head,
        f"  reqs   run {_num(s.running)}  queue {_num(s.queued)}  {_num(s.req_s, '{:.1f}')}/s"
        f"   KV cache [{kv_color}]{_num(s.token_usage and s.token_usage * 100, '{:.0f}', '%')}[/]"
        f"  prefix hit {_num(s.cache_hit_rate and s.cache_hit_rate * 100, '{:.0f}', '%')}",
        f"  tok/s  prompt {_num(s.prompt_tok_s)}  gen {_num(s.gen_tok_s)}   spec accept {spec}",
        f"  TTFT   {_pcts(s.ttft_s)}  ({s.latency_window})",
        f"  ITL    {_pcts(s.itl_s)}",
    ]


def _gpu_cells(gpus: list[GpuStat]) -> list[str]:
    """util, mem, temp, power, SM clock of the rank's GPUs (several: mean/sum/max/sum/min)."""
    if not gpus:
        return ["n/a", DASH, DASH, DASH, DASH]
    util = [g.util_pct for g in gpus if g.util_pct is not None]
    used = [g.mem_used_mib for g in gpus if g.mem_used_mib is not None]
    total = [g.mem_total_mib for g in gpus if g.mem_total_mib is not None]
    temps = [g.temp_c for g in gpus if g.temp_c is not None]
    power = [g.power_w for g in gpus if g.power_w is not None]
    clocks = [g.sm_clock_mhz for g in gpus if g.sm_clock_mhz is not None]
    mem = "unified" if not total else f"{sum(used) / 1024:.0f}/{sum(total) / 1024:.0f}G"
    throttled = any(g.throttles for g in gpus)
    clock = _num(min(clocks) if clocks else None)
    return [
        _num(sum(util) / len(util) if util else None, "{:.0f}", "%"),
        mem,
        _num(max(temps) if temps else None, "{:.0f}", "C"),
        _num(sum(power) if power else None, "{:.0f}", "W"),
        f"[red]{clock}![/]" if throttled else clock,
    ]


def _rank_gpus(rank: RankRow, ranks: list[RankRow], node: NodeView) -> list[GpuStat]:
    """The GPUs this rank uses: its share of the node's GPUs, in rank order."""
    same = [r.rank for r in ranks if r.node == rank.node]
    per = len(node.gpus) // len(same) if same else 0
    if per == 0:
        return node.gpus
    j = same.index(rank.rank)
    return node.gpus[j * per : (j + 1) * per]


def rank_table(snap: Snapshot) -> Table:
    table = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False, header_style="bold")
    for col, justify in (
        ("rank", "left"),
        ("node", "left"),
        ("state", "left"),
        ("util", "right"),
        ("gpu mem", "right"),
        ("temp", "right"),
        ("power", "right"),
        ("SM MHz", "right"),
        ("avail", "right"),
        ("rx/tx B/s", "right"),
    ):
        table.add_column(col, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    nodes = {n.node: n for n in snap.nodes}
    for r in snap.ranks:
        color = {"running": "green", "missing": "red"}.get(r.state, "yellow")
        node = nodes.get(r.node)
        if node is None or node.error is not None:
            cells = ["?"] * 7
        else:
            avail = _bytes(node.mem_available_mib * (1 << 20)) if node.mem_available_mib is not None else DASH
            rates = list(node.fabric.values())
            rx = (
                sum(x["rx_bytes_s"] or 0 for x in rates)
                if rates and rates[0]["rx_bytes_s"] is not None
                else None
            )
            tx = (
                sum(x["tx_bytes_s"] or 0 for x in rates)
                if rates and rates[0]["tx_bytes_s"] is not None
                else None
            )
            fabric = f"{_bytes(rx)}/{_bytes(tx)}" if rates else DASH
            cells = [*_gpu_cells(_rank_gpus(r, snap.ranks, node)), avail, fabric]
        table.add_row(str(r.rank), escape(r.node), f"[{color}]{r.state}[/]", *cells)
    return table


def _notes(snap: Snapshot) -> list[str]:
    """Why a cell shows n/a or ?: one line per degraded source."""
    out = []
    for n in snap.nodes:
        if n.error is not None:
            continue  # said by its NodeDegraded warning
        for what, err in (("GPU", n.gpu_error), ("memory", n.mem_error), ("fabric", n.fabric_error)):
            if err:
                out.append(f"  [dim]{escape(n.node)} {what} n/a: {escape(err)}[/]")
    return out


def screen(snap: Snapshot) -> Group:
    every = f" · every {snap.interval_s:.1f}s" if snap.interval_s else ""
    parts: list = [
        Text.from_markup(
            f"[bold]sparkctl top[/] {escape(snap.cluster)} · mode "
            f"{escape(snap.mode)} · {snap.taken_at}{every}"
        )
    ]
    for e in snap.engines:
        parts += [Text.from_markup(line) for line in engine_lines(e)]
    parts += [Text(""), rank_table(snap)]
    parts += [Text.from_markup(line) for line in _notes(snap)]
    if snap.alerts:
        parts.append(Text(""))
        for a in snap.alerts:
            parts.append(Text.from_markup(f"[yellow]! {a.code}[/] {escape(a.where)}: {escape(a.reason)}"))
    else:
        parts.append(Text.from_markup("[green]no warnings[/]"))
    return Group(*parts)


def render_text(snap: Snapshot, width: int = 80) -> str:
    """The screen as plain text at `width` columns (golden tests, docs, non-terminal output)."""
    import io

    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, force_terminal=False, highlight=False).print(
        screen(snap)
    )
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())
