"""Controller-side memory of a cluster, beside the lock (`$XDG_STATE_HOME/sparkctl/clusters/`).

- `<cluster>.json`: the last `up` attempt (so `logs` finds a rolled-back mode's files);
- `<cluster>.pending.json`: cleanup owed to nodes that were lost mid-command (a rank that may
  still run there); the next `up`, `down` or `status` that reaches the node settles it;
- `<cluster>.events.jsonl`: what the supervisor saw and did (`status` and `logs` show it).

Every file is rewritten whole through a rename (or appended by one write), so a reader never
sees half of one.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from sparkctl.lifecycle.lock import private_dir, state_dir


def cluster_file(cluster: str, suffix: str) -> Path:
    return state_dir() / "clusters" / f"{cluster}{suffix}"


def _write_json(path: Path, data: object) -> None:
    private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(data))
    os.replace(tmp, path)


def _read_json(path: Path, default: object) -> object:
    with contextlib.suppress(OSError, ValueError):
        return json.loads(path.read_text())
    return default


# ------------------------------------------------------------------------------ last attempt
def record_attempt(cluster: str, mode: str, config_hash: str, outcome: str) -> None:
    """Remember the last `up` per cluster (so `logs` can find a rolled-back mode's files)."""
    with contextlib.suppress(OSError):
        data = {"mode": mode, "config_hash": config_hash, "outcome": outcome, "at": time.time()}
        _write_json(cluster_file(cluster, ".json"), data)


def last_attempt(cluster: str) -> dict:
    data = _read_json(cluster_file(cluster, ".json"), {})
    return data if isinstance(data, dict) else {}


# ------------------------------------------------------------------------------ pending cleanup
@dataclass(frozen=True)
class Pending:
    """A container a command meant to remove but could not reach: it may still run on `node`."""

    node: str
    container: str
    rank: int | None
    mode: str | None
    since: float  # time.time() when the node was lost
    why: str

    def describe(self) -> str:
        what = f"rank {self.rank} of {self.mode}" if self.rank is not None else (self.mode or "?")
        when = time.strftime("%H:%M:%S", time.localtime(self.since))
        return f"{self.container} ({what}), left when {self.node} was lost at {when}"


def pending(cluster: str) -> list[Pending]:
    raw = _read_json(cluster_file(cluster, ".pending.json"), [])
    out = []
    for item in raw if isinstance(raw, list) else []:
        with contextlib.suppress(TypeError):
            out.append(Pending(**item))
    return out


def add_pending(cluster: str, items: list[Pending]) -> None:
    have = pending(cluster)
    keys = {(p.node, p.container) for p in have}
    merged = have + [p for p in items if (p.node, p.container) not in keys]
    _write_json(cluster_file(cluster, ".pending.json"), [asdict(p) for p in merged])


def drop_pending(cluster: str, done: list[Pending]) -> None:
    gone = {(p.node, p.container) for p in done}
    left = [asdict(p) for p in pending(cluster) if (p.node, p.container) not in gone]
    path = cluster_file(cluster, ".pending.json")
    if left:
        _write_json(path, left)
    else:
        path.unlink(missing_ok=True)


# ------------------------------------------------------------------------------ events
def record_event(cluster: str, event: str, **fields: object) -> dict:
    """Append one event (one write of one line, so concurrent appends never interleave)."""
    entry = {"at": time.time(), "event": event, **fields}
    path = cluster_file(cluster, ".events.jsonl")
    with contextlib.suppress(OSError):
        private_dir(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(entry) + "\n").encode())
        finally:
            os.close(fd)
    return entry


def events(cluster: str, since: float | None = None) -> list[dict]:
    out = []
    with contextlib.suppress(OSError):
        for line in cluster_file(cluster, ".events.jsonl").read_text().splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if isinstance(entry, dict) and (since is None or entry.get("at", 0) >= since):
                    out.append(entry)
    return out


def describe_event(e: dict) -> str:
    """One line for `status` and `logs`: when, what happened, why."""
    when = time.strftime("%H:%M:%S", time.localtime(e.get("at", 0)))
    kind, cause, detail = e.get("event"), e.get("cause", "?"), e.get("detail", "")
    who = f"replica {e['replica']}" if e.get("replica") is not None else "group"
    text = {
        "supervising": f"supervising mode {e.get('mode')}",
        "supervisor_stopped": "supervisor stopped",
        "restarting": f"{cause}: restarting "
        + (f"{who} (the others serve meanwhile)" if who != "group" else "the whole group")
        + f" (attempt {e.get('attempt')}, after {e.get('delay_s', 0):g}s backoff)",
        "restarted": f"{who} restarted because {cause}; serving again {e.get('ready_s')}s later",
        "restart_failed": f"{who} restart after '{cause}' failed: {detail}",
        "restart_deferred": f"{who} restart after '{cause}' deferred: {detail}",
        "restart_interrupted": f"{who} restart after '{cause}' interrupted (supervisor stopped)",
        "gave_up": f"gave up restarting after '{cause}': {detail}",
        "canary_failed": f"generation canary failed ({e.get('count')} in a row): {detail}",
        "node_unreachable": f"node {e.get('node')} unreachable: {detail}",
        "watch_failed": f"could not look at the ranks: {detail}",
        "guard_tripped": f"memory guard on {e.get('node')} killed the group: {e.get('reason')}",
        "guard_failed": f"memory guard could not start on {e.get('node')}: {detail}",
        "waiting_for_node": f"waiting for node {e.get('node')} to answer: {detail}",
        "node_back": f"node {e.get('node')} answers again (after {e.get('waited_s')}s)",
        "node_still_down": f"node {e.get('node')} still away after {e.get('waited_s')}s (retried every 30s): {detail}",
        "idle": f"idle: {detail}",
        "state_rebuilt": f"state of mode {e.get('mode')} rebuilt {detail}",
        "reconciling": f"{detail}: restarting the group (ranks >= 1, then rank 0)",
    }.get(str(kind), f"{kind}: {cause} {detail}".strip())
    return f"{when} {text}"
