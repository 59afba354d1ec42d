"""lifecycle/orphans.py: what a node that did not answer is called."""

from __future__ import annotations

from sparkctl.errors import ConnectError, ExitCode
from sparkctl.lifecycle.orphans import lost


def test_a_node_never_reached_is_not_a_lost_connection() -> None:
    """`up --dry-run` against an unreachable node said it "lost the connection" it never had."""
    dial = ConnectError("SSH connection refused by spark@10.0.0.2:22", node="spark2", fix="start sshd")
    err = lost("spark2", None, dial, "listing its containers")
    assert err.message.startswith("cannot reach node spark2 while listing its containers")
    assert "lost" not in err.message and err.fix == "start sshd" and err.exit_code == ExitCode.CONNECT
    cut = lost("spark2", 1, ConnectionResetError("reset by peer"), "starting rank 1")
    assert cut.message.startswith("lost the connection to node spark2")


def test_a_failed_redial_to_a_node_this_run_already_used_is_a_lost_connection() -> None:
    """Mid-`up` (ranks started there), a node whose sshd went away fails the redial: that is a
    connection lost, not a node never reached."""
    dial = ConnectError("cannot reach spark@spark2:22: refused", node="spark2")
    err = lost("spark2", 1, dial, "watching rank 1 start", had_connection=True)
    assert err.message.startswith("lost the connection to node spark2 while watching rank 1 start")
    assert err.rank == 1
