"""Run one op of the node program on a node and read its result: the JSON object on its last line
of stdout (one line naming the node when python3 is missing, the op failed or printed nothing)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from sparkctl.errors import SparkctlError
from sparkctl.node.pack import node_argv

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector, RunResult


class RemoteError(SparkctlError):
    """An op of a node program failed on the node, or printed no result."""


def run_op(
    conn: Connector, op: str, *args: str, payload: dict | None = None, timeout: float | None = None
) -> dict:
    data = json.dumps(payload).encode() if payload is not None else None
    res = conn.run(node_argv(op, *args), input=data, timeout=timeout)
    return parse_op_result(res, op)


def parse_op_result(res: RunResult, op: str, *, what: str = "weights", fix: str | None = None) -> dict:
    """The op's JSON result; RemoteError naming the node when python3 is missing, the op failed
    (its last stderr line) or it printed no JSON object. `what` names the program in the message."""
    if res.rc == 127 or ("python3" in res.stderr and "not found" in res.stderr):
        raise RemoteError(
            f"python3 is not available on the node (the {what} program needs it)",
            node=res.node,
            fix="install python3 on the node (DGX OS ships it)",
        )
    if not res.ok:
        last = (res.stderr.strip().splitlines() or res.stdout.strip().splitlines() or ["no output"])[-1]
        raise RemoteError(f"{what} {op} on the node failed (exit {res.rc}): {last}", node=res.node, fix=fix)
    try:
        doc = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        doc = None
    if not isinstance(doc, dict):
        raise RemoteError(f"{what} {op} on the node printed no result", node=res.node, fix=fix)
    return doc
