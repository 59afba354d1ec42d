"""The one interface under everything that touches a node: run an argv, stream, move bytes, Docker.

Commands are argv lists end to end; only the SSH transport turns them into a shell string
(shlex.join), so nothing is ever interpolated into a command line by hand.
"""

from __future__ import annotations

import shlex
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, Protocol

from sparkctl.errors import RemoteCommandError

if TYPE_CHECKING:
    import docker

DEFAULT_TIMEOUT = 60.0


@dataclass(frozen=True)
class RunResult:
    node: str
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def check(self, what: str | None = None, fix: str | None = None) -> RunResult:
        if not self.ok:
            detail = (self.stderr or self.stdout).strip().splitlines()
            last = detail[-1] if detail else "no output"
            raise RemoteCommandError(
                f"{what or shlex.join(self.argv)} failed (exit {self.rc}): {last}", node=self.node, fix=fix
            )
        return self


class Process(Protocol):
    """A running command with raw byte pipes (for streaming tar/image data without temp files)."""

    stdin: BinaryIO
    stdout: BinaryIO

    def close_stdin(self) -> None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def read_stderr(self) -> str: ...
    def kill(self) -> None: ...


class Connector(ABC):
    """A node sparkctl can act on. One instance per node per run, reused for every command."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._docker: docker.DockerClient | None = None

    @abstractmethod
    def run(
        self, argv: Sequence[str], *, timeout: float | None = DEFAULT_TIMEOUT, input: bytes | None = None
    ) -> RunResult:
        """Run argv to completion; never raises for a non-zero exit (use `.check()`)."""

    @abstractmethod
    def stream(self, argv: Sequence[str], *, timeout: float | None = None) -> Iterator[str]:
        """Yield output lines (stdout and stderr merged) as they come."""

    @abstractmethod
    def popen(self, argv: Sequence[str]) -> Process:
        """Start argv with byte pipes on stdin/stdout."""

    @abstractmethod
    def put(self, data: bytes, path: str, mode: int = 0o644) -> None:
        """Write bytes to a file on the node (atomically: temp name, then rename)."""

    @abstractmethod
    def get(self, path: str) -> bytes:
        """Read a whole file from the node."""

    @abstractmethod
    def _make_docker(self) -> docker.DockerClient: ...

    def docker(self) -> docker.DockerClient:
        """Docker SDK client for this node's engine (reused)."""
        if self._docker is None:
            self._docker = self._make_docker()
        return self._docker

    def close(self) -> None:
        if self._docker is not None:
            try:
                self._docker.close()
            finally:
                self._docker = None

    @property
    @abstractmethod
    def description(self) -> str:
        """Human form of where this connects, e.g. 'spark@10.0.0.2:22' or 'local'."""

    def __enter__(self) -> Connector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
