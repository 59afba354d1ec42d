"""Log files (follower script, --since, merging), the cluster lock (real flock across processes),
and the readiness probe (against a real local HTTP server)."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sparkctl.errors import LockHeldError, UsageError
from sparkctl.lifecycle.lock import ClusterLock
from sparkctl.lifecycle.logs import follower_argv, merge, parse_line, parse_since, read_argv
from sparkctl.planning.build import Endpoint
from sparkctl.runtime.readiness import probe


def test_follower_appends_docker_logs_and_keeps_the_previous_file(tmp_path):
    # A `docker` on PATH that prints like `docker logs --timestamps` and records its argv.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "docker"
    fake.write_text('#!/bin/sh\necho "$@" > "$ARGV_OUT"\necho "2025-01-31T12:00:00.5Z hello from $4"\n')
    fake.chmod(0o755)
    log = tmp_path / "logs" / "c.log"
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "ARGV_OUT": str(tmp_path / "argv")}
    old = tmp_path / "logs" / "c.log.1"
    for done in (lambda: log.exists(), lambda: old.exists()):
        subprocess.run(
            follower_argv("sparkctl-x-r0", str(log)), env=env, check=True, timeout=10, input=b"{}\n"
        )
        for _ in range(200):  # detached: wait for it to rotate and write
            if done() and log.exists() and log.read_text():
                break
            time.sleep(0.05)
    assert log.read_text() == "2025-01-31T12:00:00.5Z hello from sparkctl-x-r0\n"
    assert old.read_text() == log.read_text()  # previous run kept once
    assert (tmp_path / "argv").read_text().split() == ["logs", "--timestamps", "--follow", "sparkctl-x-r0"]


def test_follower_masks_keys_on_the_node_before_they_reach_the_file(tmp_path):
    """SGLang's start-up line (its settings, keys included, repr-escaped), a short key and a token
    the engine printed: the file on the node holds none of them (the values reach the follower on
    its stdin, never its command line)."""
    from sparkctl.engines.sglang.flags import LOG_SECRET_PATTERNS
    from sparkctl.lifecycle.logs import FOLLOW_SCRIPT, LOG_FILTER
    from sparkctl.secrets import mask_forms

    key, admin, token = "sk-we'ird\\key", "ab", "hf_canary_0123456789"
    settings = f"server_args=ServerArgs(api_key={key!r}, admin_api_key={admin!r}, port=30000)"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "docker").write_text(
        "#!/bin/sh\n"
        f"echo {shlex.quote('2025-01-31T12:00:00Z [INFO] ' + settings)}\n"
        f"echo {shlex.quote('2025-01-31T12:00:01Z STANDIN: /run/secrets/HF_TOKEN=' + token)}\n"
        "echo '2025-01-31T12:00:02Z a cab, abc and ab-x stay'\n"
    )
    (bindir / "docker").chmod(0o755)
    log = tmp_path / "logs" / "r.log"
    long, short = mask_forms([key, admin, token])
    first = json.dumps({"long": long, "short": short, "patterns": list(LOG_SECRET_PATTERNS)}) + "\n"
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    argv = ["sh", "-c", FOLLOW_SCRIPT, "sparkctl-log", "c", str(log), LOG_FILTER]  # not detached: wait for it
    assert key not in " ".join(argv) and token not in " ".join(argv)
    subprocess.run(argv, env=env, check=True, timeout=30, input=first.encode())
    text = log.read_text()
    assert "api_key=***, admin_api_key=***, port=30000" in text
    assert "HF_TOKEN=***" in text and token not in text and "we\\'ird" not in text and "ird" not in text
    assert "a cab, abc and ***-x stay" in text.splitlines()[-1]  # a short key only where it stands alone
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def test_since_script_filters_by_timestamp_and_tails(tmp_path):
    f = tmp_path / "r.log"
    f.write_text(
        "2025-01-31T11:59:59.9Z old\n2025-01-31T12:00:00.1Z a\n2025-01-31T12:00:01Z b\n2025-01-31T12:00:02Z c\n"
    )
    since = datetime(2025, 1, 31, 12, 0, 0, tzinfo=UTC)
    out = subprocess.run(read_argv(str(f), 2, since), capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["2025-01-31T12:00:01Z b", "2025-01-31T12:00:02Z c"]
    out = subprocess.run(read_argv(str(f), 10, since), capture_output=True, text=True, check=True).stdout
    assert [line.split()[1] for line in out.splitlines()] == ["a", "b", "c"]


def test_parse_since():
    now = datetime(2025, 1, 31, 12, tzinfo=UTC)
    assert parse_since("10m", now) == now - timedelta(minutes=10)
    assert parse_since("2h", now) == now - timedelta(hours=2)
    assert parse_since("2025-01-31T10:00:00", now) == datetime(2025, 1, 31, 10, tzinfo=UTC)
    with pytest.raises(UsageError):
        parse_since("yesterday", now)


def test_merge_orders_ranks_by_time_and_keeps_untimed_lines_with_their_rank():
    lines = [
        parse_line(0, "spark1", "2025-01-31T12:00:01Z r0 first"),
        parse_line(0, "spark1", "continuation without a stamp"),
        parse_line(0, "spark1", "2025-01-31T12:00:03Z r0 second"),
        parse_line(1, "spark2", "2025-01-31T12:00:02Z r1 only"),
    ]
    assert [x.text for x in merge(lines)] == [
        "r0 first",
        "continuation without a stamp",
        "r1 only",
        "r0 second",
    ]
    assert merge(lines)[0].render(12) == "rank0@spark1 | r0 first"


HOLD = """
import sys, time
from sparkctl.lifecycle.lock import ClusterLock
ClusterLock("c1", "sparkctl up tp2").acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_lock_refusal_names_the_holder_and_a_killed_holder_releases_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(LockHeldError) as err:
            ClusterLock("c1", "sparkctl down").acquire()
        assert f"pid {holder.pid}" in err.value.message and "`sparkctl up tp2`" in err.value.message
        assert err.value.exit_code == 4
        ClusterLock("other-cluster").acquire().release()  # locks are per cluster
    finally:
        holder.kill()
        holder.wait()
    with ClusterLock("c1", "sparkctl down") as lock:
        assert json.loads(lock.path.read_text())["command"] == "sparkctl down"
    assert lock.path.read_text() == ""  # released: nobody described as holder


class _Engine(BaseHTTPRequestHandler):
    health = 503

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        if self.path == "/v1/models":
            body, code = json.dumps({"data": [{"id": "tiny"}]}).encode(), 200
        elif self.path == "/health":
            body, code = b"", type(self).health
        else:
            body, code = b"", 404
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a: object) -> None:
        pass


def test_probe_needs_models_with_the_served_name_and_health():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        port = srv.server_address[1]
        warming = probe(Endpoint("127.0.0.1", port, "tiny"))
        assert warming.models_ok and not warming.ready and "503" in warming.detail
        _Engine.health = 200
        assert probe(Endpoint("127.0.0.1", port, "tiny")).ready
        wrong = probe(Endpoint("127.0.0.1", port, "other"))
        assert not wrong.ready and "not other" in wrong.detail
    finally:
        srv.shutdown()
    down = probe(Endpoint("127.0.0.1", port, "tiny"))
    assert not down.models_ok and "/v1/models" in down.detail


def test_state_and_locks_are_private_and_a_key_never_reaches_the_lock(tmp_path, monkeypatch):
    """`bench --compare A B --api-key K` held the lock with K in a 0644 file; now the command is
    redacted and every state file is 0600 in 0700 directories (an old 0755 state dir is tightened)."""
    from sparkctl.lifecycle import state
    from sparkctl.lifecycle.lock import ClusterLock, lock_path, redacted_command

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    (tmp_path / "sparkctl").mkdir(mode=0o755)
    (tmp_path / "sparkctl").chmod(0o755)
    argv = ["sparkctl", "bench", "--compare", "a", "b", "--api-key", "sk-K", "--hf-token=hf_T", "-k", "x"]
    monkeypatch.setattr(sys, "argv", argv)
    with ClusterLock("c"):
        text = lock_path("c").read_text()
    assert (
        "sk-K" not in text and "hf_T" not in text and "--api-key '***'" in text and "--hf-token=***" in text
    )
    assert (
        redacted_command(["sparkctl", "verify", "--api-key-env", "NAME"])
        == "sparkctl verify --api-key-env '***'"
    )
    state.record_event("c", "up", mode="solo")
    state._write_json(state.cluster_file("c", ".json"), {"a": 1})
    root = tmp_path / "sparkctl"
    for p in [root, *root.rglob("*")]:
        want = 0o700 if p.is_dir() else 0o600
        assert stat.S_IMODE(p.stat().st_mode) == want, p
