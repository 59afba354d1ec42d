"""Persistent per-rank log files on the nodes, and reading them back merged across ranks.

Mechanism: right after a rank's container starts, `up` starts a detached follower on that node
(`setsid -f sh -c 'exec python3 -S -c LOG_FILTER NAME FILE'`: `docker logs --timestamps --follow
NAME` appended to FILE line by line, every secret masked on the node). It needs no daemon
and nothing in the container (the plan's argv runs unchanged), it lives exactly as long as the
container (docker logs -f returns when the container stops, after writing everything), and it
survives the CLI exiting or losing its SSH connection. The file outlives the container too, so
a rank that crashed and was rolled back can still be read. The previous run's file is kept as
`<file>.1`. Each line starts with Docker's RFC 3339 timestamp, which `logs` uses to merge ranks
in time order and for `--since`.
"""

from __future__ import annotations

import json
import posixpath
import queue
import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from sparkctl.connectors.pool import NodePool
from sparkctl.errors import ConnectError, UsageError
from sparkctl.fanout import fan_out
from sparkctl.planning.build import RankSpec
from sparkctl.profile.derived import node_path
from sparkctl.profile.schema import Profile
from sparkctl.secrets import mask_forms, redact, secret_values

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector

# Positional parameters only ($1 container, $2 file, $3 the filter): nothing is interpolated.
# Logs may hold what an engine prints: the directory is 0700 and the files 0600 (umask 077).
FOLLOW_SCRIPT = (
    'umask 077 && d="$(dirname "$2")" && mkdir -p "$d" && chmod 700 "$d" && '
    '{ [ ! -e "$2" ] || { mv -f "$2" "$2.1" && chmod 600 "$2.1"; }; } && '
    'exec python3 -S -c "$3" "$1" "$2"'
)
# The follower itself (python3 stdlib, on the node): reads what to mask from its first stdin line
# (the values and the engine's key patterns: never on a command line), lets go of the SSH
# session's descriptors, and writes `docker logs --timestamps --follow` into the file line by line
# with every secret masked, so that no key the engine prints (an engine may log its settings, keys
# included, on start) ever reaches a file on the node.
LOG_FILTER = r"""
import json, os, re, subprocess, sys
name, path = sys.argv[1], sys.argv[2]
cfg = json.loads(sys.stdin.readline() or "{}")
null = os.open("/dev/null", os.O_RDWR)
out = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
for fd in (0, 1, 2):
    os.dup2(null if fd == 0 else out, fd)
parts = [re.escape(v.encode()) for v in cfg.get("long", [])]
parts += [b"(?<![A-Za-z0-9])" + re.escape(v.encode()) + b"(?![A-Za-z0-9])" for v in cfg.get("short", [])]
values = re.compile(b"|".join(parts)) if parts else None
keyed = [re.compile(p.encode()) for p in cfg.get("patterns", [])]
proc = subprocess.Popen(
    ["docker", "logs", "--timestamps", "--follow", name], stdin=null, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
)
for line in proc.stdout:
    for k in keyed:
        line = k.sub(lambda m: m.group(1) + b"***", line)
    if values is not None:
        line = values.sub(b"***", line)
    os.write(out, line)
sys.exit(proc.wait())
"""
# Lines whose timestamp (to the second) is >= $1, then the last $2 of them.
SINCE_SCRIPT = 'awk -v s="$1" \'substr($0, 1, 19) >= s\' "$3" | tail -n "$2"'
TS_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d))\s?")


def log_file(log_dir: str, container_name: str) -> str:
    """Path on the node (log_dir already expanded for that node with plan.node_path)."""
    return posixpath.join(log_dir, f"{container_name}.log")


def follower_argv(container_name: str, path: str, docker_host: str | None = None) -> list[str]:
    argv = ["setsid", "-f", "sh", "-c", FOLLOW_SCRIPT, "sparkctl-log", container_name, path, LOG_FILTER]
    return ["env", f"DOCKER_HOST={docker_host}", *argv] if docker_host else argv


def start_follower(
    conn: Connector,
    container_name: str,
    path: str,
    values: list[str] | None = None,
    patterns: tuple[str, ...] = (),
) -> None:
    """Start the detached log follower for a running container on its node; `values` (the secrets
    this rank can see) and `patterns` (the engine's own key lines) are masked on the node."""
    long, short = mask_forms(values or [])
    first = json.dumps({"long": long, "short": short, "patterns": list(patterns)}) + "\n"
    docker_host = getattr(conn, "docker_host", None)  # a local engine that is not the default one
    conn.run(follower_argv(container_name, path, docker_host), timeout=30, input=first.encode()).check(
        f"starting the log follower for {container_name}",
        fix="the node needs `setsid` (util-linux), python3 and the docker CLI on PATH",
    )


@dataclass(frozen=True)
class LogLine:
    rank: int
    node: str
    ts: datetime | None
    text: str
    label: str | None = None  # instead of rank@node (the supervisor's events)

    @property
    def prefix(self) -> str:
        return self.label or f"rank{self.rank}@{self.node}"

    def render(self, width: int, timestamps: bool = False) -> str:
        prefix = self.prefix.ljust(width)
        stamp = f"{self.ts.isoformat(timespec='milliseconds')} " if timestamps and self.ts else ""
        return f"{prefix} | {stamp}{self.text}"


def split_timestamp(line: str) -> tuple[datetime | None, str]:
    """'2024-05-01T12:00:00.123456789Z text' -> (datetime, 'text'); lines without one pass as is."""
    from sparkctl.runtime.containers import parse_docker_time

    m = TS_RE.match(line)
    if not m:
        return None, line
    try:
        return parse_docker_time(m.group(1)), line[m.end() :]
    except ValueError:
        return None, line


def parse_line(rank: int, node: str, line: str, label: str | None = None) -> LogLine:
    ts, text = split_timestamp(line)
    return LogLine(rank, node, ts, text, label)


def source_label(spec: RankSpec) -> str:
    """The prefix of a container's lines: `rank1@spark2`, or `router@spark1` for the router."""
    return f"router@{spec.node}" if spec.role == "router" else f"rank{spec.rank}@{spec.node}"


ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def plain(text: str) -> str:
    """Without terminal colour codes (sglang-router colours its log lines even into a pipe)."""
    return ANSI_RE.sub("", text)


def _spec_line(spec: RankSpec, raw: str) -> LogLine:
    if spec.role != "router":
        return parse_line(spec.rank, spec.node, raw)
    return parse_line(spec.rank, spec.node, plain(raw), source_label(spec))


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")


def parse_since(value: str, now: datetime | None = None) -> datetime:
    """`--since`: a duration back from now (90s, 10m, 2h, 1d) or an ISO date/time (UTC if naive)."""
    now = now or datetime.now(UTC)
    m = _DURATION.match(value.strip())
    if m:
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[m.group(2)]
        return now - timedelta(**{unit: float(m.group(1))})
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"--since '{value}' is neither a duration nor a date/time",
            fix="use e.g. --since 10m, --since 2h or --since 2025-01-31T12:00:00",
        ) from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def since_key(since: datetime) -> str:
    """The `YYYY-MM-DDTHH:MM:SS` prefix (UTC) that Docker's timestamps compare against as text."""
    return since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def read_argv(path: str, tail: int, since: datetime | None) -> list[str]:
    if since is None:
        return ["tail", "-n", str(tail), "--", path]
    return ["sh", "-c", SINCE_SCRIPT, "sparkctl-logs", since_key(since), str(tail), path]


def follow_argv(path: str, tail: int) -> list[str]:
    # -F: keep following across the rotation a new `up` does (file renamed, a new one created).
    return ["tail", "-n", str(tail), "-F", "--", path]


def event_lines(events: list[dict], since: datetime | None) -> list[LogLine]:
    """The supervisor's events as log lines (label `supervisor`), to merge with the ranks'."""
    from sparkctl.lifecycle.state import describe_event

    out = []
    for e in events:
        ts = datetime.fromtimestamp(float(e.get("at", 0)), UTC)
        if since is None or ts >= since:
            out.append(LogLine(-1, "", ts, describe_event(e).split(" ", 1)[1], label="supervisor"))
    return out


def guard_lines(profile, pool, since: datetime | None) -> list[LogLine]:  # Profile, NodePool
    """The memory guards' trips as log lines (label `guard@<node>`), read on every node that answers."""
    from sparkctl.lifecycle.guard import describe_trip, nodes_to_read, read

    out = []
    for node, doc in read(profile, pool, nodes_to_read(profile)).items():
        for trip in doc.get("trips", []):
            ts = datetime.fromtimestamp(float(trip.get("at", 0)), UTC)
            if since is None or ts >= since:
                out.append(
                    LogLine(-1, node, ts, describe_trip(node, trip).split(" ", 1)[1], label=f"guard@{node}")
                )
    return out


def merge(lines: Iterable[LogLine]) -> list[LogLine]:
    """Time order across ranks; lines without a timestamp keep their place after their rank's last."""
    indexed = list(enumerate(lines))
    last: dict[int, datetime] = {}
    keyed = []
    for i, line in indexed:
        if line.ts is not None:
            last[line.rank] = line.ts
        ts = line.ts or last.get(line.rank) or datetime.min.replace(tzinfo=UTC)
        keyed.append((ts, i, line))
    return [line for _, _, line in sorted(keyed, key=lambda k: (k[0], k[1]))]


# ------------------------------------------------------------------------------ reading back
def rank_log_path(profile: Profile, spec: RankSpec) -> str:
    return log_file(node_path(profile.engine.log_dir, profile.node(spec.node), profile), spec.container_name)


def read_rank(conn: Connector, spec: RankSpec, path: str, tail: int, since: datetime | None) -> list[LogLine]:
    res = conn.run(read_argv(path, tail, since), timeout=120)
    if not res.ok:
        detail = (res.stderr or res.stdout).strip().splitlines()
        raise FileNotFoundError(detail[-1] if detail else f"cannot read {path}")
    masks = secret_values(spec.secret_refs(), conn)  # the profile's sources, whatever this shell has
    return [_spec_line(spec, redact(line, masks)) for line in res.stdout.splitlines()]


def read_all(
    profile: Profile, pool: NodePool, specs: list[RankSpec], tail: int, since: datetime | None
) -> tuple[list[LogLine], dict[int, str], dict[str, ConnectError]]:
    """Merged lines of the ranks' files, {rank: why not} for the files that could not be read, and
    {node: error} for the nodes that could not be reached at all (each node once)."""
    by_rank = {s.rank: s for s in specs}

    def read(rank: int) -> list[LogLine]:
        spec = by_rank[rank]
        return read_rank(pool.get(spec.node), spec, rank_log_path(profile, spec), tail, since)

    lines: list[LogLine] = []
    missing: dict[int, str] = {}
    lost: dict[str, ConnectError] = {}
    results = fan_out(list(by_rank), read)
    for rank, err in results.errors.items():
        spec = by_rank[rank]
        missing[spec.rank] = (
            f"{spec.node}:{rank_log_path(profile, spec)}: {getattr(err, 'message', None) or err}"
        )
        if isinstance(err, ConnectError):
            lost.setdefault(spec.node, err)
    for got in results.ok.values():
        lines += got
    return merge(lines), missing, lost


def follow_all(
    profile: Profile, pool: NodePool, specs: list[RankSpec], tail: int, since: datetime | None
) -> Iterator[LogLine]:
    """Lines of every rank as they are written (one `tail -F` per rank), until the caller stops."""
    q: queue.Queue[LogLine | None] = queue.Queue()

    def pump(spec: RankSpec) -> None:
        try:
            conn = pool.get(spec.node)
            masks = secret_values(spec.secret_refs(), conn)
            for raw in conn.stream(follow_argv(rank_log_path(profile, spec), tail)):
                line = _spec_line(spec, redact(raw, masks))
                if since is None or line.ts is None or line.ts >= since:
                    q.put(line)
        except Exception as exc:  # noqa: BLE001 - shown in the stream, the other ranks go on
            q.put(_spec_line(spec, f"(log stream ended: {exc})"))
        q.put(None)

    for spec in specs:
        threading.Thread(target=pump, args=(spec,), name=f"sparkctl-logs-r{spec.rank}", daemon=True).start()
    open_streams = len(specs)
    while open_streams:
        item = q.get()
        if item is None:
            open_streams -= 1
        else:
            yield item
