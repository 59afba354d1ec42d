"""SshRank0ToPeer agrees with `ship`: node-to-node login that fails is an error, since ship needs it."""

from __future__ import annotations

from sparkctl.findings import Severity
from sparkctl.preflight.checks.ssh import check_ssh_peer


def test_a_refused_login_between_nodes_is_an_error_because_ship_needs_it() -> None:
    denied = check_ssh_peer(
        "spark1", "spark2", "10.77.0.2", 255, "spark@10.77.0.2: Permission denied (publickey).\n"
    )
    assert denied.severity is Severity.ERROR and "sparkctl ship" in denied.message
    assert denied.fix.startswith("on spark1: `ssh-copy-id 10.77.0.2`")
    unknown = check_ssh_peer("spark1", "spark2", "10.77.0.2", 255, "Host key verification failed.\n")
    assert unknown.severity is Severity.ERROR and "ssh-keyscan -H 10.77.0.2" in unknown.fix
    assert check_ssh_peer("spark1", "spark2", "10.77.0.2", 0, "").severity is Severity.OK
