"""The shipped profiles run as users run them: from rank 0 and from a third machine (issue 42).

test_shipped_profiles.py readdresses every node at an unreachable loopback port. That never runs
the path a user on the recommended machine takes: the profile as shipped (`address: local` for
rank 0's node, the peers by name), a local Docker that is not there or that answers but lacks
the image (rank 0 before `ship`: conftest.py's stand-in engine), a home that is not /home/spark.
Nor a third machine: every node by name, none local.

Every profile x mode x command runs in-process (typer's CliRunner: the engines' parsers are
imported once, not once per call), with the network blocked. DNS fails loudly:
`socket.getaddrinfo` refuses every name (numeric addresses pass), a TCP/UDP connect is refused,
and an offline command (`profile check`, `plan`, `export k8s`) must have asked for neither.
`fit` runs with memory, against header-only copies of the shipped models (conftest.py's HF cache).
Exit codes are README's table: `profile check`, `plan`, `plan --check`, `fit`, `export k8s` 0 (the
two checks 1 on a mode shipped to show a refusal), preflight 1 (unreachable nodes are its
SshReachable errors; a local Docker without the image is its ImagePresent error), the commands
that touch nodes 5 — or 0 ("nothing running") when every node of the mode is rank 0's and its Docker
answers.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sparkctl.cli import app
from sparkctl.errors import ExitCode

from .test_shipped_profiles import REFUSED

ROOT = Path(__file__).resolve().parents[2]
PROFILES = sorted((ROOT / "profiles").glob("*.yaml"))
WHERE = ("rank0", "rank0-docker", "third")


def _modes(path: Path) -> list[str]:
    """Every mode; of a fleet (`models:`), every SERVICE:MODE."""
    data = yaml.safe_load(path.read_text())
    if data.get("models"):
        return [f"{name}:{mode}" for name, svc in data["models"].items() for mode in svc["modes"]]
    return list(data["modes"])


CASES = [pytest.param(p, m, w, id=f"{w}-{p.stem}-{m}") for p in PROFILES for m in _modes(p) for w in WHERE]
REAL_GETADDRINFO = socket.getaddrinfo
REAL_CONNECT = socket.socket.connect


@pytest.fixture
def names(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every host name looked up and every network address connected to; each lookup fails (no
    DNS here, and none may be needed) and the network is blocked: a TCP/UDP connect is refused
    (a local Docker's unix socket is not the network)."""
    asked: list[str] = []

    def connect(sock: socket.socket, address, *args, **kwargs):  # noqa: ANN001, ANN202
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            asked.append(f"connect {address}")
            raise OSError(101, f"network blocked in this test: {address}")
        return REAL_CONNECT(sock, address, *args, **kwargs)

    def connect_ex(sock: socket.socket, address, *args, **kwargs):  # noqa: ANN001, ANN202
        try:
            connect(sock, address, *args, **kwargs)
        except OSError as exc:
            return exc.errno or 101
        return 0

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)

    def getaddrinfo(host, port, *args, **kwargs):  # noqa: ANN001, ANN202
        try:
            return REAL_GETADDRINFO(host, port, *args, flags=socket.AI_NUMERICHOST)
        except (socket.gaierror, TypeError):
            asked.append(str(host))
            raise socket.gaierror(socket.EAI_NONAME, f"DNS refused in this test: {host}") from None

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield asked


def _profile(tmp: Path, path: Path, where: str) -> Path:
    """The shipped file as is (rank 0), or every node by name (a third machine)."""
    data = yaml.safe_load(path.read_text())
    if where == "third":
        for node in data["nodes"]:
            if node["address"] == "local":
                node["address"] = f"{node['name']}.local"
    data["ssh"] = {**data.get("ssh", {}), "connect_timeout": 2, "known_hosts": str(tmp / "known_hosts")}
    out = tmp / path.name
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def _env(tmp: Path, cache: Path, docker: str | None) -> dict[str, str]:
    return {
        "HOME": str(tmp / "home"),  # not the profile user's home: nothing may depend on it
        "XDG_STATE_HOME": str(tmp / "state"),
        "XDG_CACHE_HOME": str(cache),  # the parser's answers only: see conftest.py
        "DOCKER_HOST": docker or f"unix://{tmp}/no-docker.sock",  # rank 0's Docker, or none there
        "COLUMNS": "80",
        "SPARKCTL_API_KEY": "contract-test-key",
        "HF_TOKEN": "contract-test-token",
        "SPARKCTL_PROFILE": "",
        "SPARKCTL_DEBUG": "",
    }


def _all_local(path: Path, mode: str) -> bool:
    """Every node of the mode (a fleet's SERVICE:MODE: of the whole fleet, which status and down
    ask) is rank 0's own (`address: local`)."""
    data = yaml.safe_load(path.read_text())
    local = {n["name"] for n in data["nodes"] if n["address"] == "local"}
    if ":" in mode:
        return {n["name"] for n in data["nodes"]} <= local
    return set(data["modes"][mode]["nodes"]) <= local


def _commands(
    mode: str, out: Path, reached: bool = False, refused: bool = False
) -> list[tuple[list[str], int, bool]]:
    """(argv, README's exit code, offline: touches no node, so looks up no name). A fleet's
    SERVICE:MODE: a command that runs one service wants its name (exit 2) before it reaches a node;
    `export k8s` renders every service.
    `reached`: every node of the mode answers (rank 0's, its Docker up): nothing running is exit 0.
    `refused`: a mode shipped to show a refusal (test_shipped_profiles.REFUSED): with the model's
    heads in the cache, `plan --check` and `fit` exit 1."""
    touch = ExitCode.OK if reached else ExitCode.CONNECT
    fit = ExitCode.CHECK_FAILED if refused else ExitCode.OK
    if ":" in mode:
        return [
            (["plan", mode], ExitCode.OK, True),
            (["plan", mode, "--check"], ExitCode.OK, False),
            (["fit", mode], ExitCode.OK, False),
            (["preflight"], ExitCode.USAGE, True),  # a fleet's preflight names its service
            (["status"], touch, False),  # every service, and the fleet's gateway
            (["down", "--dry-run"], touch, False),
            (["export", "k8s", mode, "-o", str(out)], ExitCode.OK, True),
        ]
    return [
        (["profile", "check"], ExitCode.OK, True),
        (["plan", mode], ExitCode.OK, True),
        (["plan", mode, "--check"], fit, False),
        (["fit", mode], fit, False),
        (["preflight", mode], ExitCode.CHECK_FAILED, False),
        (["status", mode], touch, False),
        (["down", mode, "--dry-run"], touch, False),
        (["export", "k8s", mode, "-o", str(out)], ExitCode.OK, True),
    ]


@pytest.mark.parametrize(("path", "mode", "where"), CASES)
def test_every_command_from_where_users_stand(
    tmp_path: Path,
    shared_cache: Path,
    docker_without_images: str,
    hf_home: Path,
    names: list[str],
    path: Path,
    mode: str,
    where: str,
) -> None:
    (tmp_path / "home").mkdir()
    prof = _profile(tmp_path, path, where)
    docker = docker_without_images if where == "rank0-docker" else None
    reached = docker is not None and _all_local(path, mode)
    refused = (path.stem, mode) in REFUSED
    env = {**_env(tmp_path, shared_cache, docker), "HF_HOME": str(hf_home)}  # `fit` with memory
    for args, code, offline in _commands(mode, tmp_path / "k8s", reached, refused):
        names.clear()
        res = CliRunner().invoke(app, [*args, "-p", str(prof)], env=env)
        said = res.output
        assert res.exception is None or isinstance(res.exception, SystemExit), (args, res.exception)
        assert "Traceback" not in said, (args, said)
        assert res.exit_code == code, (args, res.exit_code, said[-3000:])
        if offline:
            assert names == [], (args, "looked up", names)
        if args[0] == "fit" and not refused:  # the memory model ran and found room
            assert not re.search(r"^(error|warn)\s+(MemoryFit|VllmMemory)", said, re.M), said[-3000:]
            fits = re.search(r"^ok\s+(MemoryFit|VllmMemory)", said, re.M) or "verdict" in said
            assert fits and "does not fit" not in said, said[-3000:]
        if docker and args[0] == "preflight" and ":" not in mode:  # the engine answered: no image
            assert "error ImagePresent" in said and "DockerEngine" not in said, said[-3000:]
