"""`sparkctl ship`'s output: `--json` is one object, printed before rich is ever imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkctl.commands.ship import _render
from sparkctl.ship.report import ShipReport

ROOT = Path(__file__).resolve().parents[3]


def test_json_output_is_the_report_and_imports_no_rich() -> None:
    code = (
        "import sys\n"
        "from sparkctl.commands.ship import _render\n"
        "from sparkctl.ship.report import ShipReport\n"
        "_render(ShipReport('spark1', ['spark2']), True, [])\n"
        "print('rich' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    doc, _, rich_loaded = res.stdout.rpartition("}\n")
    assert json.loads(doc + "}") == {
        **ShipReport("spark1", ["spark2"]).to_json(),
        "page_cache": [],
    }
    assert rich_loaded.strip() == "False"


def test_text_output_says_there_is_nothing_to_ship(capsys: pytest.CaptureFixture[str]) -> None:
    _render(ShipReport("spark1", []), False)
    assert "nothing to ship" in capsys.readouterr().out


def test_a_json_reship_loads_no_rich_docker_or_engine_up_to_the_first_connect() -> None:
    """What `ship --json` runs before it connects: the CLI, the command's imports, the profile and
    the mode's nodes (of a two-node profile), then its flows' modules; none of these pulls rich or
    worse, nor the planner (launch lines a ship does not need: ~35 ms of a re-ship)."""
    code = (
        "import sys\n"
        "from sparkctl import cli\n"
        "cli.parser_for(['ship', '--json'])\n"
        "from sparkctl.commands._common import load_service\n"
        "from sparkctl.connectors.pool import NodePool\n"
        "from sparkctl.profile.derived import mode_nodes\n"
        "from sparkctl.ship import NullProgress, ship\n"
        "import sparkctl.ship.run, sparkctl.ship.image, sparkctl.ship.weights, sparkctl.ship.pagecache\n"
        f"prof, mode = load_service(__import__('pathlib').Path({str(ROOT / 'profiles' / 'dual-spark.yaml')!r}), None)\n"
        "mode_nodes(prof, mode)\n"
        "print(','.join(m for m in ('rich', 'docker', 'torch', 'sglang', 'vllm', 'openai', 'numpy', "
        "'sparkctl.planning.build') "
        "if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == ""
