"""`sparkctl` leaves without the interpreter's teardown: exit codes and output survive it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLAN_PROFILE = ROOT / "profiles" / "quad-spark.yaml"


def _sparkctl(*args: str, **kw) -> subprocess.CompletedProcess:  # noqa: ANN003 - subprocess.run options
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "sparkctl", *args], env=env, timeout=60, **kw)


def test_success_prints_and_exits_zero() -> None:
    res = _sparkctl("--version", capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.startswith("sparkctl ")


def test_a_usage_error_keeps_its_exit_code_and_message(tmp_path: Path) -> None:
    res = _sparkctl("plan", "-p", str(tmp_path / "missing.yaml"), capture_output=True, text=True)
    assert res.returncode == 2, res
    assert "missing.yaml" in res.stderr


def test_a_bad_option_exits_two() -> None:
    res = _sparkctl("ship", "--no-such-flag", capture_output=True, text=True)
    assert res.returncode == 2 and "no-such-flag" in res.stderr


def test_output_of_several_buffers_arrives_whole() -> None:
    """Buffered stdout is flushed before the process leaves (this plan is ~17 KB of JSON)."""
    res = _sparkctl("plan", "-p", str(PLAN_PROFILE), "--json", capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert len(res.stdout) > 8192 and json.loads(res.stdout)["ranks"]  # whole, parseable


def test_a_closed_pipe_is_an_error_exit_without_a_trace() -> None:
    """The reader is gone before sparkctl writes (`sparkctl plan --json | head -0`): exit 1, and
    none of Python's "Exception ignored ... BrokenPipeError" at teardown (which also exits 120)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkctl", "plan", "-p", str(PLAN_PROFILE), "--json"],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # before the interpreter has even started: every write meets a closed pipe
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert b"Traceback" not in err and b"Exception ignored" not in err, err


def test_a_non_daemon_thread_finishes_before_the_process_leaves(tmp_path: Path) -> None:
    """What Python's own exit guarantees: a worker a command left running completes its write."""
    out = tmp_path / "written"
    code = (
        "import sys, threading, time\n"
        "from sparkctl import cli\n"
        "def work():\n"
        "    time.sleep(0.2)\n"
        f"    open({str(out)!r}, 'w').write('done')\n"
        "threading.Thread(target=work).start()\n"
        "cli._fast_exit(0)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    res = subprocess.run([sys.executable, "-c", code], env=env, timeout=60, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert out.read_text() == "done"


def _plugins_setting(env: dict[str, str]) -> str:
    code = (
        "import os\n"
        "from sparkctl import cli\n"
        "cli.parser_for = lambda argv: lambda: print(repr(os.environ.get('PYDANTIC_DISABLE_PLUGINS')))\n"
        "cli.main()\n"
    )
    full = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    full.update({"PYTHONPATH": str(ROOT / "src"), **env})
    res = subprocess.run([sys.executable, "-c", code], env=full, timeout=60, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_pydantic_plugins_are_not_looked_for_unless_the_user_says_otherwise() -> None:
    assert _plugins_setting({}) == "'__all__'"  # no scan of every package's entry points
    assert _plugins_setting({"PYDANTIC_DISABLE_PLUGINS": ""}) == "''"  # the user's own value stays
