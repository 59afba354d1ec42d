"""A new user's failures: one line naming the node + a fix, the documented exit code, no traceback.

Real parts: the real CLI in a subprocess (so paramiko's and Python's own stderr output counts),
a real loopback socket that accepts TCP and never speaks SSH, a Docker socket path nothing
listens on. No testbed needed.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sparkctl.cli import app
from sparkctl.errors import ExitCode

ROOT = Path(__file__).resolve().parents[2]


def sparkctl(*args: str, env: dict | None = None, pre: str = "") -> subprocess.CompletedProcess:
    """The CLI in a fresh interpreter; `pre` runs first (e.g. to hide a package)."""
    code = f"import sys\n{pre}\nfrom sparkctl.cli import main\nsys.argv = ['sparkctl', *sys.argv[1:]]\nmain()"
    full = {k: v for k, v in os.environ.items() if k != "SPARKCTL_DEBUG"}
    full.update({"COLUMNS": "80", "PYTHONPATH": str(ROOT / "src"), **(env or {})})
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=full, timeout=120
    )


def one_error(res: subprocess.CompletedProcess, code: int) -> str:
    """The run failed with `code`, and stderr is exactly an `error ...` line and its `fix:`."""
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "Exception" not in res.stderr, res.stderr
    text = " ".join(res.stderr.split())  # rich wraps at 80 columns
    assert text.startswith("error "), res.stderr
    assert " fix: " in text, res.stderr
    return text


def write_profile(path: Path, nodes: list[dict], **extra: object) -> Path:
    spec = {
        "cluster": "ux",
        "nodes": nodes,
        "image": {"ref": "sglang-dflash:spark"},
        "model": {"target": {"id": "org/tiny", "revision": "main"}},
        "engine": {"port": 18888, "log_dir": str(path.parent / "logs")},
        "modes": {"solo": {"nodes": [nodes[-1]["name"]], "tp": 1, "default": True}},
        **extra,
    }
    path.write_text(yaml.safe_dump(spec))
    return path


# ------------------------------------------------------------------------- missing package
@pytest.fixture
def models_server() -> Iterator[str]:
    """A real loopback HTTP server answering GET /v1/models (what verify/bench probe first)."""
    import json
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()
    thread.join()


@pytest.mark.parametrize("command", ["verify", "bench"])
def test_verify_and_bench_without_openai_name_the_package(command: str, models_server: str) -> None:
    res = sparkctl(command, "--url", models_server, "--model", "m", pre="sys.modules['openai'] = None")
    text = one_error(res, ExitCode.USAGE)
    assert "openai" in text and "pip install" in text


def test_debug_mode_shows_the_traceback_and_the_suite_catches_one(
    no_cli_tracebacks: list[str], models_server: str
) -> None:
    res = sparkctl(
        "verify",
        "--url",
        models_server,
        "--model",
        "m",
        pre="sys.modules['openai'] = None",
        env={"SPARKCTL_DEBUG": "1"},
    )
    assert "Traceback" in res.stderr and not no_cli_tracebacks  # debug runs are allowed one
    crash = sparkctl("status", pre="raise RuntimeError('a bug')")
    assert crash.returncode == 1 and len(no_cli_tracebacks) == 1  # the suite-wide scan saw it
    no_cli_tracebacks.clear()


def test_openai_is_a_default_dependency() -> None:
    """The README's `pip install -e .` must install what `verify`/`bench` import."""
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(re.match(r"openai\b", d) for d in deps), deps


# ------------------------------------------------------------------ local Docker not running
@pytest.mark.parametrize("command", ["status", "up"])
def test_docker_not_running_on_the_local_node(tmp_path: Path, command: str) -> None:
    prof = write_profile(tmp_path / "p.yaml", [{"name": "spark1", "address": "local"}])
    env = {"DOCKER_HOST": f"unix://{tmp_path}/docker.sock", "XDG_STATE_HOME": str(tmp_path / "state")}
    res = sparkctl(command, "-p", str(prof), env=env)
    assert res.returncode == ExitCode.CONNECT, (res.stdout, res.stderr)
    both = " ".join((res.stdout + res.stderr).split())
    assert "Docker is not running" in both and "spark1" in both
    assert "unreachable" not in both  # the node answers: its Docker engine does not
    assert "systemctl start docker" in both
    assert "Traceback" not in res.stderr
    if command == "up":
        one_error(res, ExitCode.CONNECT)


# ----------------------------------------------------------------- port 22 without a banner
@pytest.fixture
def silent_port() -> Iterator[int]:
    """A real loopback TCP server that accepts connections and never says a word."""
    srv = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield srv.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    srv.close()


@pytest.mark.parametrize(
    ("command", "code"),
    [("status", ExitCode.CONNECT), ("up", ExitCode.CONNECT), ("preflight", ExitCode.CHECK_FAILED)],
)
def test_peer_without_ssh_banner(tmp_path: Path, silent_port: int, command: str, code: int) -> None:
    node = {"name": "spark2", "address": "127.0.0.1", "port": silent_port}
    prof = write_profile(
        tmp_path / "p.yaml", [node], ssh={"connect_timeout": 1, "known_hosts": str(tmp_path / "known_hosts")}
    )
    only = ["--only", "SshReachable"] if command == "preflight" else []
    res = sparkctl(command, "-p", str(prof), *only, env={"XDG_STATE_HOME": str(tmp_path / "state")})
    assert res.returncode == code, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "Exception (client)" not in res.stderr, res.stderr
    both = " ".join((res.stdout + res.stderr).split())
    assert "sent no SSH banner" in both and "spark2" in both
    if command == "up":
        text = one_error(res, code)
        assert f"ssh -v -p {silent_port} 127.0.0.1" in text


# ------------------------------------------------------------------------------ grammar
def test_profile_option_before_or_after_the_subcommand(tmp_path: Path) -> None:
    prof = str(ROOT / "profiles" / "solo-spark.yaml")
    runner = CliRunner()
    env = {"SPARKCTL_PROFILE": str(tmp_path / "missing.yaml"), "COLUMNS": "200"}
    for args in (["-p", prof, "profile", "check"], ["profile", "check", "-p", prof]):
        res = runner.invoke(app, args, env=env)
        assert res.exit_code == 0, (args, res.output)
        assert "ok profile for cluster spark" in res.output
    # Given after the subcommand it wins; the environment variable is the fallback.
    res = runner.invoke(app, ["-p", str(tmp_path / "nope.yaml"), "profile", "check", "-p", prof], env=env)
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["profile", "check"], env=env)
    assert res.exit_code == ExitCode.USAGE and "missing.yaml" in res.output


def test_fabric_test_takes_mode_positionally() -> None:
    prof = str(ROOT / "profiles" / "dual-spark.yaml")
    res = CliRunner().invoke(app, ["fabric-test", "nosuchmode", "-p", prof], env={"COLUMNS": "200"})
    assert res.exit_code == ExitCode.USAGE, res.output
    assert "nosuchmode" in res.output and "unexpected extra argument" not in res.output


def test_logs_without_files_fails_and_json_lists_lines(tmp_path: Path) -> None:
    prof = write_profile(tmp_path / "p.yaml", [{"name": "spark1", "address": "local"}])
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "COLUMNS": "200"}
    res = CliRunner().invoke(app, ["logs", "solo", "-p", str(prof)], env=env)
    assert res.exit_code == ExitCode.RUNTIME, res.output
    assert "no log files for mode solo" in res.output and f"sparkctl -p {prof} up solo" in res.output

    from sparkctl.lifecycle.logs import rank_log_path
    from sparkctl.planning.build import build_plan
    from sparkctl.profile import load_profile_file

    loaded = load_profile_file(prof)
    path = Path(rank_log_path(loaded, build_plan(loaded, "solo").ranks[0]))
    path.parent.mkdir(parents=True)
    path.write_text("2026-01-01T00:00:00.000000000Z hello from rank 0\n")
    res = CliRunner().invoke(app, ["logs", "--mode", "solo", "--json", "-p", str(prof)], env=env)
    assert res.exit_code == 0, res.output
    import json

    data = json.loads(res.stdout)
    assert data["mode"] == "solo" and [x["text"] for x in data["lines"]] == ["hello from rank 0"]
    assert data["lines"][0]["rank"] == 0 and data["lines"][0]["node"] == "spark1"


def test_every_read_command_has_json() -> None:
    from typer.main import get_command

    group = get_command(app)
    read = [
        "plan",
        "fit",
        "preflight",
        "status",
        "logs",
        "top",
        "verify",
        "bench",
        "fabric-test",
        "profile check",
    ]
    for name in read:
        cmd = group
        for part in name.split():
            cmd = cmd.commands[part]  # type: ignore[attr-defined]
        assert "--json" in {o for p in cmd.params for o in p.opts}, name


def test_exit_code_table_matches_errors_module() -> None:
    """README's one table of exit codes is exactly errors.ExitCode."""
    text = (ROOT / "README.md").read_text()
    section = text.split("| exit code |", 1)[1].split("\n\n", 1)[0]
    documented = {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d+) \| `(\w+)` \|", section, re.M)}
    actual = {v: k for k, v in vars(ExitCode).items() if not k.startswith("_") and isinstance(v, int)}
    assert documented == actual


def test_mode_is_positional_everywhere() -> None:
    from typer.main import get_command

    group = get_command(app)
    for name in (
        "plan",
        "fit",
        "preflight",
        "ship",
        "up",
        "switch",
        "verify",
        "bench",
        "fabric-test",
        "logs",
        "top",
    ):
        args = [p for p in group.commands[name].params if p.param_type_name == "argument"]  # type: ignore[attr-defined]
        assert args and args[0].name in ("mode", "mode_arg"), name


def test_a_next_step_in_a_fix_repeats_the_users_profile(tmp_path: Path) -> None:
    """`fix: ... run `sparkctl down` again` dropped the -p the user gave (issue 42)."""
    prof = ROOT / "profiles" / "two-gpu-box.yaml"
    env = {"DOCKER_HOST": f"unix://{tmp_path}/none.sock", "COLUMNS": "250", "HOME": str(tmp_path)}
    res = CliRunner().invoke(app, ["-p", str(prof), "down", "--dry-run"], env=env)
    assert res.exit_code == 5, res.output
    assert f"`sparkctl -p {prof} down` again" in res.output, res.output
