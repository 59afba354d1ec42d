"""remote/ops.py: one op of a node program, its result read from the last stdout line; every way
it fails is one RemoteError naming the node (and the caller's fix)."""

from __future__ import annotations

import pytest

from sparkctl.connectors.base import RunResult
from sparkctl.remote.ops import RemoteError, parse_op_result


def _res(rc: int, stdout: str = "", stderr: str = "") -> RunResult:
    return RunResult("spark2", ("python3",), rc, stdout, stderr)


def test_the_last_stdout_line_is_the_result() -> None:
    assert parse_op_result(_res(0, 'progress\n{"ok": 1}\n'), "state") == {"ok": 1}


def test_a_missing_python3_says_so_with_its_fix() -> None:
    with pytest.raises(RemoteError, match="python3 is not available") as err:
        parse_op_result(_res(127, stderr="sh: python3: not found"), "state", what="memory guard")
    assert err.value.node == "spark2" and "install python3" in (err.value.fix or "")
    assert "memory guard" in str(err.value)


def test_a_failed_op_names_its_last_error_line_and_the_callers_fix() -> None:
    with pytest.raises(RemoteError, match=r"memory guard start on the node failed \(exit 1\): boom") as err:
        parse_op_result(_res(1, stderr="trace\nboom\n"), "start", what="memory guard", fix="up --no-guard")
    assert err.value.fix == "up --no-guard" and err.value.node == "spark2"


@pytest.mark.parametrize("stdout", ["", "not json", "[1, 2]"])
def test_no_json_object_is_no_result(stdout: str) -> None:
    with pytest.raises(RemoteError, match="weights finish on the node printed no result"):
        parse_op_result(_res(0, stdout), "finish")
