"""Connector for the node sparkctl runs on: plain subprocesses and the local Docker engine."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sparkctl.connectors.base import DEFAULT_TIMEOUT, Connector, RunResult
from sparkctl.errors import DockerDownError

if TYPE_CHECKING:
    import docker


class LocalProcess:
    def __init__(self, argv: Sequence[str]) -> None:
        self._proc = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert self._proc.stdin and self._proc.stdout
        self.stdin = self._proc.stdin
        self.stdout = self._proc.stdout

    def close_stdin(self) -> None:
        self.stdin.close()

    def wait(self, timeout: float | None = None) -> int:
        return self._proc.wait(timeout)

    def read_stderr(self) -> str:
        assert self._proc.stderr
        return self._proc.stderr.read().decode(errors="replace")

    def kill(self) -> None:
        self._proc.kill()


class LocalConnector(Connector):
    def __init__(self, node: str, docker_host: str | None = None) -> None:
        super().__init__(node)
        self.docker_host = docker_host

    @property
    def description(self) -> str:
        return "local"

    def run(
        self, argv: Sequence[str], *, timeout: float | None = DEFAULT_TIMEOUT, input: bytes | None = None
    ) -> RunResult:
        try:
            proc = subprocess.run(list(argv), input=input, capture_output=True, timeout=timeout)
        except FileNotFoundError:
            return RunResult(self.node, tuple(argv), 127, "", f"{argv[0]}: command not found")
        except subprocess.TimeoutExpired as exc:
            return RunResult(self.node, tuple(argv), 124, _text(exc.stdout), f"timed out after {timeout:g}s")
        return RunResult(self.node, tuple(argv), proc.returncode, _text(proc.stdout), _text(proc.stderr))

    def stream(self, argv: Sequence[str], *, timeout: float | None = None) -> Iterator[str]:
        proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout
        try:
            yield from (line.rstrip("\n") for line in proc.stdout)
        finally:
            proc.kill()
            proc.wait()

    def popen(self, argv: Sequence[str]) -> LocalProcess:
        return LocalProcess(argv)

    def put(self, data: bytes, path: str, mode: int = 0o644) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def _make_docker(self) -> docker.DockerClient:
        import docker

        try:
            if self.docker_host:
                return docker.DockerClient(base_url=self.docker_host)
            return docker.from_env()
        except docker.errors.DockerException as exc:  # version negotiation: no engine answers
            raise docker_down_error(
                self.node, self.docker_host or os.environ.get("DOCKER_HOST"), exc
            ) from None


def docker_down_error(node: str, host: str | None, exc: BaseException) -> DockerDownError:
    """Docker missing or stopped on the node sparkctl runs on: the same exit code as over SSH."""
    import shutil

    where = host or "unix:///var/run/docker.sock"
    if shutil.which("dockerd") is None and shutil.which("docker") is None:
        what, fix = "Docker is not installed", "install Docker Engine (docs/quickstart.md), then rerun"
    elif "Permission denied" in str(exc):
        what = f"no permission to use the Docker engine at {where}"
        fix = "add yourself to the docker group (`sudo usermod -aG docker $USER`, then log in again)"
    else:
        what = f"Docker is not running (no engine answers at {where})"
        fix = "start it: `sudo systemctl start docker` (check with `docker info`)"
    return DockerDownError(f"{what} on this node", node=node, fix=fix)


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data
