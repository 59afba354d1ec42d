"""Node to node: the argv a source node uses to reach a peer, and running a push on the source.

The bytes go source -> peer over the system OpenSSH client ON the source node, with that node's
own keys and its known_hosts (strict: an unknown or changed peer key fails, nothing is accepted
on the fly), to the peer's fabric address when the profile has one. This process only starts the
push and reads progress lines: no image or weight byte passes through the machine running sparkctl.
"""

from __future__ import annotations

import contextlib
import json
import threading
from typing import TYPE_CHECKING

from sparkctl.connectors.ssh import remote_command
from sparkctl.errors import SparkctlError
from sparkctl.fanout import Cancelled, CancelToken
from sparkctl.node.pack import node_argv
from sparkctl.node.relay import BOOT
from sparkctl.ship.errors import RERUN, ShipError
from sparkctl.ship.progress import Progress

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector, Process
    from sparkctl.profile.schema import Profile

# AES-GCM first: OpenSSH's fastest bulk cipher on CPUs with AES instructions (both Spark CPUs have
# them); the others keep a node whose sshd lacks GCM working.
CIPHERS = "aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com,aes128-ctr,aes256-ctr"
# Key exchange is left to OpenSSH: its >= 9.0 default is the post-quantum hybrid
# (sntrup761x25519 / mlkem768x25519). X25519 alone would save ~50 ms of CPU per end per stream
# (measured in the testbed), not worth giving up post-quantum protection of the weights' link.


def peer_address(profile: Profile, node: str) -> str:
    """Where the source reaches the peer: its fabric IP when it has one (the fast link)."""
    n = profile.node(node)
    return str(n.fabric.ip) if n.fabric is not None and n.fabric.ip is not None else n.address


def hop_argv(profile: Profile, peer: str) -> list[str]:
    """`ssh ... PEER --` as run on the source; `chain_entry` gives the one remote-command word."""
    n = profile.node(peer)
    user = n.user or profile.ssh.user
    host = peer_address(profile, peer)
    return [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "ConnectTimeout=10",
        "-o",
        f"Ciphers={CIPHERS}",
        "-o",
        "Compression=no",
        "-o",
        "LogLevel=ERROR",
        "-o",
        "ServerAliveInterval=15",
        "-p",
        str(n.port or profile.ssh.port),
        f"{user}@{host}" if user else host,
        "--",
    ]


def chain_entry(node: str, hop: list[str], cmd: list[str]) -> dict:
    """One link of a push chain. The peer's login shell (bash, dash, fish, tcsh...) parses the string
    OpenSSH sends it, so the words after `--` are encoded here, by the controller path's own encoder
    (connectors/ssh.py): `remote` runs `cmd` there, `relay` the relay's constant boot line. The node
    program only appends one of these strings to `hop`: it never quotes anything itself."""
    return {
        "node": node,
        "hop": hop,
        "cmd": cmd,
        "remote": remote_command(cmd),
        "relay": remote_command(["python3", "-c", BOOT]),
    }


class Transfers:
    """Every push in flight, so that Ctrl-C can end them all at once (their node side dies with
    its stdin: see node/push.py)."""

    def __init__(self, cancel: CancelToken | None = None) -> None:
        self.cancel = cancel or CancelToken()
        self._procs: set[Process] = set()
        self._lock = threading.Lock()

    def add(self, proc: Process) -> None:
        with self._lock:
            self._procs.add(proc)
        if self.cancel.cancelled:
            self.stop()

    def discard(self, proc: Process) -> None:
        with self._lock:
            self._procs.discard(proc)

    def stop(self) -> None:
        self.cancel.cancel()
        with self._lock:
            procs, self._procs = list(self._procs), set()
        for proc in procs:
            with contextlib.suppress(Exception):  # best effort: the link may be gone already
                proc.kill()


def run_push(src: Connector, op: str, req: dict, transfers: Transfers, progress: Progress, key: str) -> dict:
    """Start `op` on the source, relay its progress lines, return its result document."""
    transfers.cancel.check()
    proc = src.popen(node_argv(op))
    transfers.add(proc)
    last = 0
    try:
        proc.stdin.write((json.dumps(req) + "\n").encode())
        proc.stdin.flush()
        for line in proc.stdout:
            doc = json.loads(line)
            if "progress" in doc:
                progress.advance(key, doc["progress"] - last)
                last = doc["progress"]
            elif "result" in doc:
                if "crash" in doc["result"]:
                    raise ShipError(
                        f"the transfer on the source failed: {doc['result']['crash']}",
                        node=src.node,
                        fix=RERUN,
                    )
                with contextlib.suppress(Exception):  # it exits right after its result: reap it
                    proc.wait(timeout=10)
                return doc["result"]
    except (ValueError, OSError, EOFError) as exc:
        if transfers.cancel.cancelled:
            raise Cancelled("cancelled") from None
        raise ShipError(f"the transfer on the source broke: {exc}", node=src.node, fix=RERUN) from None
    except SparkctlError:
        raise
    finally:
        transfers.discard(proc)
        with contextlib.suppress(Exception):  # already finished
            proc.kill()
    if transfers.cancel.cancelled:
        raise Cancelled("cancelled")
    err = proc.read_stderr().strip().splitlines()
    raise ShipError(
        f"the transfer on the source ended without a result: {err[-1] if err else 'no output'}",
        node=src.node,
        fix=RERUN,
    )


def hop_error(src: str, peer: str, host: str, rc: int, stderr: str) -> ShipError | None:
    """ssh exits 255 for its own failures (unreachable, key refused, unknown host key)."""
    if rc != 255:
        return None
    last = (stderr.strip().splitlines() or ["ssh failed"])[-1]
    low = stderr.lower()
    if "host key" in low:
        fix = f"on {src}: check {peer}'s fingerprint, then `ssh-keyscan -H {host} >> ~/.ssh/known_hosts`"
    elif "permission denied" in low:
        fix = f"on {src}: `ssh-copy-id {host}` (or `sparkctl init --ssh-setup` run on {src})"
    else:  # unreachable, or the link broke mid-way: the peer's side
        return ShipError(
            f"SSH from {src} to {peer} ({host}) failed or broke: {last}",
            node=peer,
            fix=f"check that {src} reaches {host} (`sparkctl preflight`), then {RERUN}",
        )
    return ShipError(f"{src} cannot SSH to {peer} ({host}) to send the data: {last}", node=src, fix=fix)
