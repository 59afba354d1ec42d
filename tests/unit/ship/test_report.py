"""ship/report.py: what one `ship` did, and the first failure raised as itself."""

from __future__ import annotations

import pytest

from sparkctl.ship import ShipReport as Exported
from sparkctl.ship.errors import DiskFullError, ShipError
from sparkctl.ship.report import ShipReport, raise_first


def test_the_first_failure_is_raised_as_itself_naming_the_others() -> None:
    report = ShipReport("spark1", ["spark2", "spark3"])
    report.errors = [
        ("spark2", "weights", DiskFullError("spark2: disk full")),
        ("spark3", "image", ShipError("x")),
    ]
    with pytest.raises(DiskFullError) as err:
        raise_first(report)
    assert "also failed: spark3 image" in err.value.message and err.value.report is report
    assert not report.ok and report.to_json()["errors"][1] == {
        "node": "spark3",
        "what": "image",
        "error": "x",
        "fix": None,
    }
    assert Exported is ShipReport  # the package's entry point re-exports it
