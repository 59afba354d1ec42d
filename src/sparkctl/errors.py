"""Expected failures: one red line naming node/rank and the fix, and a distinct exit code.

Anything that is not a SparkctlError is a bug and prints a traceback.
"""

from __future__ import annotations


class ExitCode:
    OK = 0
    CHECK_FAILED = 1  # preflight/verify found errors
    USAGE = 2  # bad profile, bad flags, unknown names
    RUNTIME = 3  # a rank died, a deadline passed, a transfer failed
    LOCKED = 4  # another sparkctl holds the cluster lock
    CONNECT = 5  # a node could not be reached
    INTERRUPTED = 130


class SparkctlError(Exception):
    """An expected failure. `fix` tells the user what to do; `node`/`rank` say where."""

    exit_code = ExitCode.RUNTIME

    def __init__(
        self, message: str, *, fix: str | None = None, node: str | None = None, rank: int | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.node = node
        self.rank = rank

    def where(self) -> str:
        parts = []
        if self.node:
            parts.append(f"node {self.node}")
        if self.rank is not None:
            parts.append(f"rank {self.rank}")
        return ", ".join(parts)

    def __str__(self) -> str:
        where = self.where()
        text = f"[{where}] {self.message}" if where else self.message
        return f"{text}\n  fix: {self.fix}" if self.fix else text


class ProfileError(SparkctlError):
    exit_code = ExitCode.USAGE


class UsageError(SparkctlError):
    exit_code = ExitCode.USAGE


class ConnectError(SparkctlError):
    exit_code = ExitCode.CONNECT


class DockerDownError(ConnectError):
    """The node answers but its Docker engine does not (missing, stopped, or no permission)."""


class AuthError(ConnectError):
    """The node answered but refused our key (passwordless SSH not set up)."""


class LockHeldError(SparkctlError):
    exit_code = ExitCode.LOCKED


class RemoteCommandError(SparkctlError):
    """A command on a node exited non-zero where success was required."""

    exit_code = ExitCode.RUNTIME
