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
