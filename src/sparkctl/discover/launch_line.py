"""A pasted launch line, split the way a shell would split it but never run by one (shlex):
its `docker run ... IMAGE` part (image, env, mounts, shm), leading `VAR=value` words, and the
engine's words as (flag, values) items. Which engine, and what its flags mean, is the engine's
(engines/<kind>/from_command.py); nothing here knows an engine."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from sparkctl.errors import UsageError

FIX = "paste the one command you run, e.g. python -m ... --model-path ORG/NAME ... (quotes as in your shell)"
_SHELL_OPS = {"&&", "||", ";", "|", "&", ">", ">>", "<", "2>", "2>&1"}
_ENV_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.DOTALL)
_NUMBER = re.compile(r"-\d+(\.\d*)?([eE][-+]?\d+)?")
# `docker run` options that take no value (docker 27 `docker run --help`); every other one does.
_DOCKER_BOOL_LONG = {
    "detach", "interactive", "tty", "rm", "privileged", "init", "read-only", "publish-all",
    "no-healthcheck", "oom-kill-disable", "quiet", "help", "sig-proxy", "disable-content-trust",
}  # fmt: skip
_DOCKER_BOOL_SHORT = set("ditPq")
# how a container is run by hand, which sparkctl decides itself without a word
_HARMLESS = {"rm", "detach", "interactive", "tty", "name", "quiet"}
_DOCKER_LAUNCH = (
    ("docker", "run"),
    ("docker", "container", "run"),
    ("nvidia-docker", "run"),
    ("podman", "run"),
)


@dataclass
class Container:
    """What the `docker run` part said: the image and the options sparkctl has a key for."""

    image: str
    env: dict[str, str] = field(default_factory=dict)
    volumes: list[tuple[str, str]] = field(default_factory=list)  # (host, container)
    shm_size: str | None = None
    ignored: list[str] = field(default_factory=list)  # options sparkctl sets itself (--gpus, --network...)


@dataclass
class LaunchLine:
    words: list[str]  # the engine's command and flags (after the image, the env words)
    container: Container | None = None
    env: dict[str, str] = field(default_factory=dict)  # leading VAR=value words and docker -e


def split_line(text: str) -> list[str]:
    """shlex's words of a pasted line; backslash-newline continuations joined; shell operators
    (a pipe, `&&`, a redirect) refused: one command, which no shell runs."""
    joined = re.sub(r"\\\r?\n", " ", text)
    try:
        words = shlex.split(joined, comments=True, posix=True)  # `# ...` ends a line, as in a shell script
    except ValueError as exc:  # an unclosed quote
        raise UsageError(f"--from-command: cannot split the line: {exc}", fix=FIX) from None
    ops = [w for w in words if w in _SHELL_OPS]
    if ops:
        raise UsageError(
            f"--from-command: {ops[0]!r} joins several commands; give only the launch command", fix=FIX
        )
    if not words:
        raise UsageError("--from-command: the line is empty", fix=FIX)
    return words


def _docker_opt(words: list[str], i: int) -> tuple[str, str | None, int]:
    """The option at words[i] -> (name, value or None for a bare one, next index)."""
    word = words[i]
    if word.startswith("--"):
        name, eq, value = word[2:].partition("=")
        if eq or name in _DOCKER_BOOL_LONG:
            return name, value if eq else None, i + 1
        return name, words[i + 1] if i + 1 < len(words) else "", i + 2
    letters = word[1:]
    if all(c in _DOCKER_BOOL_SHORT for c in letters):  # -it, -d, --rm's short friends
        return letters, None, i + 1
    name = letters[-1] if all(c in _DOCKER_BOOL_SHORT for c in letters[:-1]) else letters[0]
    if len(letters) > 1 and name == letters[0]:  # -eKEY=V, -v/a:/b
        return name, letters[1:], i + 1
    return name, words[i + 1] if i + 1 < len(words) else "", i + 2


def _container(words: list[str], start: int) -> tuple[Container, int]:
    """`docker run [OPTIONS] IMAGE`: the container's options, up to the image (index after it)."""
    env: dict[str, str] = {}
    volumes: list[tuple[str, str]] = []
    shm: str | None = None
    ignored: list[str] = []
    i = start
    while i < len(words) and words[i].startswith("-"):
        name, value, i = _docker_opt(words, i)
        if name in ("e", "env") and value:
            key, eq, val = value.partition("=")
            if eq:
                env[key] = val
            else:
                ignored.append(f"-e {key} (a value from the shell that ran docker)")
        elif name in ("v", "volume", "mount") and value:
            parts = value.split(":")
            if name != "mount" and len(parts) >= 2:
                volumes.append((parts[0], parts[1]))
        elif name == "shm-size" and value:
            shm = re.sub(r"([kmg])b$", r"\1", value.lower())  # docker's 16gb is the profile's 16g
        elif name not in _HARMLESS and not set(name) <= set("ditq"):
            ignored.append(f"--{name}" if len(name) > 1 else f"-{name}")
    if i >= len(words):
        raise UsageError("--from-command: `docker run` names no image", fix=FIX)
    return Container(words[i], env, volumes, shm, ignored), i + 1


def parse_line(text: str) -> LaunchLine:
    """The line's parts; the engine's words are what follows the image (or the whole line)."""
    words = split_line(text)
    i = 0
    while i < len(words) - 1 and words[i] in ("sudo", "exec"):
        i += 1
    container = None
    for launch in _DOCKER_LAUNCH:
        if tuple(words[i : i + len(launch)]) == launch:
            container, i = _container(words, i + len(launch))
            break
    if len(words) == i + 3 and words[i].rsplit("/", 1)[-1] in ("sh", "bash") and words[i + 1] == "-c":
        inner = parse_line(words[i + 2])  # `IMAGE bash -c "python -m ..."`: the command it runs
        return LaunchLine(inner.words, container, {**(container.env if container else {}), **inner.env})
    env = dict(container.env) if container else {}
    while i < len(words) and (words[i] == "env" or _ENV_WORD.fullmatch(words[i])):
        key, eq, value = words[i].partition("=")
        if eq:
            env[key] = value
        i += 1
    return LaunchLine(words[i:], container, env)


def is_flag(word: str) -> bool:
    return word.startswith("-") and len(word) > 1 and not _NUMBER.fullmatch(word)


def items(words: list[str]) -> list[tuple[str, list[str]]]:
    """argparse's grammar without a parser: ("", [positional]) or (flag as written, its values:
    the words up to the next flag; `--flag=value` is one value). Negative numbers are values."""
    out: list[tuple[str, list[str]]] = []
    for word in words:
        if is_flag(word):
            flag, eq, value = word.partition("=")
            out.append((flag, [value]) if eq and flag.startswith("--") else (word, []))
            if eq and flag.startswith("--"):
                out.append(("", []))  # closes it: the next word is a positional, not its value
        elif out and out[-1][0]:
            out[-1][1].append(word)
        else:
            out.append(("", [word]))
    return [(f, v) for f, v in out if f or v]
