"""The free-form values of a profile (engine/mode args and env, names, the log directory): the
grammar each must follow, refused with the key and what a valid value looks like (issue 42)."""

from __future__ import annotations

import posixpath
import re

ArgValue = str | int | float | bool | None | list[str | int | float]

SECRET_NAME_RE = re.compile(r"(TOKEN|SECRET|PASSWORD|API_KEY|ACCESS_KEY)", re.IGNORECASE)
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
FLAG_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_NUMBER_RE = re.compile(r"-\d+(\.\d*)?([eE][-+]?\d+)?")
# More flags than an engine's parser has (the one measured, in 0.5.23, has 532): 60,000 entries took 40 s
# to plan before they were refused, one by one, by the engine's parser.
MAX_ARGS = 1000
# Directories of the system a log directory may not be (`up` makes it the node user's, mode 700).
SYSTEM_DIRS = frozenset(
    {"/", "/tmp", "/var", "/var/tmp", "/var/log", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64",
     "/opt", "/home", "/root", "/dev", "/proc", "/sys", "/run", "/boot", "/srv", "/mnt", "/media"}
)  # fmt: skip


def one_line(key: str, value: str) -> str:
    """A value that reaches a command line or a config file: no line break, no NUL."""
    if any(c in value for c in "\n\r\0"):
        raise ValueError(f"{key}: a line break or NUL in {value!r}; give it on one line")
    return value


def check_args(args: dict[str, ArgValue]) -> dict[str, ArgValue]:
    """Flag names without dashes, nothing but the name in a key (`revision=X` would pass the
    managed-flag guard and argparse would keep its value); values on one line; a value starting
    with '-' (a list item included) would be read as another flag: refused here. Flags the engine
    manages are refused when the plan is built."""
    if len(args) > MAX_ARGS:
        raise ValueError(
            f"{len(args)} flags, more than any engine's parser has (at most {MAX_ARGS} here); "
            "keep the flags your launch sets, e.g. `max-running-requests: 8`"
        )
    clean: dict[str, ArgValue] = {}
    for key, value in args.items():
        name = key.lstrip("-")
        if not FLAG_NAME_RE.fullmatch(name):
            raise ValueError(
                f"{key}: not a flag name; write `max-running-requests: 8`, a flag without dashes "
                "and its value after ':' (never `flag=value` in the key)"
            )
        values = value if isinstance(value, list) else [value]
        for v in values:
            if isinstance(v, str):
                one_line(name, v)
        if any(isinstance(v, str) and v.startswith("-") and not _NUMBER_RE.fullmatch(v) for v in values):
            raise ValueError(
                f"{key}: a value starting with '-' would be read as another flag; set that flag itself"
            )
        clean[name.replace("_", "-")] = value
    return clean


def check_env(env: dict[str, str]) -> dict[str, str]:
    for key, value in env.items():
        if not ENV_NAME_RE.fullmatch(key):
            raise ValueError(
                f"{key}: not an environment variable name; a valid one looks like NCCL_DEBUG "
                "(letters, digits and _, not starting with a digit; the value after ':')"
            )
        if SECRET_NAME_RE.search(key):
            raise ValueError(
                f"{key}: '{key}' looks like a secret; declare it under engine.secrets "
                f"(env: or file:) so it is never stored or printed"
            )
        one_line(key, value)
    return env


def check_log_dir(path: str) -> str:
    """Its own directory (`up` creates it and makes it the node user's, mode 700): never a
    directory of the system such as /tmp."""
    one_line("log_dir", path)
    if posixpath.normpath(path) in SYSTEM_DIRS or path.rstrip("/") in ("~", ""):
        raise ValueError(
            f"{path!r} is a directory of the system (up makes it mode 700); give sparkctl its own, "
            "e.g. ~/.local/state/sparkctl/logs"
        )
    return path


def release_keys(data: object) -> object:
    """The profile's `engine` mapping with `engine.<kind>_version` (the spelling before
    engine.options, as the shipped profiles had it) moved to that engine's `options.version`;
    another engine's such key was ignored, and still is."""
    from sparkctl.profile.base import DEFAULT_ENGINE, ENGINE_KINDS

    if not isinstance(data, dict):
        return data
    kind, data = data.get("kind", DEFAULT_ENGINE), dict(data)
    for key in [f"{k}_version" for k in ENGINE_KINDS if f"{k}_version" in data]:
        value = data.pop(key)
        if key != f"{kind}_version":
            continue
        options = dict(data.get("options") or {})
        if options.setdefault("version", value) != value:
            raise ValueError(f"{key} and options.version differ: keep options.version alone")
        data["options"] = options
    return data
