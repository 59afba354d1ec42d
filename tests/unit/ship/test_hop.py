"""The node-to-node hop (ship's source node -> peer): the string OpenSSH on the source sends the
peer's login shell is the controller path's encoding, for the consumer and for a relay alike."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sparkctl.connectors.ssh import remote_command
from sparkctl.node.relay import BOOT, first_hop
from sparkctl.ship.hop import chain_entry

MARK = Path("/tmp/sparkctl-unit-hop-pwned")
HOSTILE = [
    f"/tmp/hf\\'\"; touch {MARK}; #",  # the hf_cache: ran under fish with shlex quoting
    f"$(touch {MARK})",
    f"`touch {MARK}`",
    f"(touch {MARK})",
    f"a'b; touch {MARK}",
    "!!",
    "%self",
    "{a,b}",
    "~",
    "a b\nc",
    "",
    "-n",
]
HOP = ["ssh", "-o", "BatchMode=yes", "peer", "--"]


def _login_shell(shell: str, argv: list[str]) -> subprocess.CompletedProcess:
    """What sshd does with the words after `--`: one string, handed to the user's login shell."""
    path = shutil.which(shell)
    if path is None:
        pytest.fail(f"{shell} is not installed (scripts/install-deps installs it)")
    assert argv[: len(HOP)] == HOP and len(argv) == len(HOP) + 1
    return subprocess.run([path, "-c", argv[-1]], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("shell", ["sh", "bash", "dash", "fish", "tcsh"])
def test_a_consumer_gets_its_arguments_exactly_under_any_login_shell(shell: str) -> None:
    chain = [chain_entry("peer", HOP, ["printf", "%s|", *HOSTILE])]
    argv, line = first_hop(chain, "PROGRAM")
    assert line == b""
    res = _login_shell(shell, argv)
    assert res.stdout == "".join(f"{a}|" for a in HOSTILE), res.stderr
    assert not MARK.exists()


@pytest.mark.parametrize("shell", ["bash", "fish", "tcsh"])
def test_a_relay_starts_its_constant_boot_line_under_any_login_shell(shell: str) -> None:
    chain = [chain_entry("p1", HOP, ["true"]), chain_entry("p2", HOP, ["printf", "%s", HOSTILE[0]])]
    argv, line = first_hop(chain, "PROGRAM")
    assert json.loads(line) == {"prog": "PROGRAM", "chain": chain}  # the rest travels on stdin
    assert argv[-1] == remote_command(["python3", "-c", BOOT])
    # Decoded by the login shell, the relay's words are exactly python3 -c BOOT.
    probe = argv[-1].replace("sparkctl rpython3", "sparkctl rprintf b" + _b64("%s\n"), 1)
    res = _login_shell(shell, [*HOP, probe])
    assert res.stdout.splitlines() == ["-c", BOOT], res.stderr


def test_without_a_hop_the_command_runs_as_argv() -> None:
    argv, _line = first_hop([chain_entry("here", [], ["docker", "load", "-q"])], "PROGRAM")
    assert argv == ["docker", "load", "-q"]


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()
