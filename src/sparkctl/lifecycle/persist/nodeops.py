"""What `sparkctl persist` runs on a node, over the profile's SSH connection: constant scripts
with their inputs as positional parameters, a file's content on stdin (never on a command line).
A unit file needs root: a node user that is not root writes it through `sudo -n` (it never
prompts); the guard's files under the user's home are written as the user."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkctl.errors import SparkctlError
from sparkctl.facts.probe import sh_argv

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector

TIMEOUT = 30.0

_WHO = 'printf "%s\\n%s\\n%s\\n" "$(id -un)" "$(id -u)" "$HOME"; [ -d /run/systemd/system ] && echo systemd || echo none'
# Write stdin to $1 (mode $2) through a temp name and a rename; "unchanged" when it holds it already.
_WRITE = r"""set -e
f="$1"; t="$f.sparkctl-tmp.$$"; d="$(dirname "$f")"
# a private file (no group/other bits) gets a private directory when this makes it (as `up` does)
if [ ! -d "$d" ]; then case "$2" in *00) mkdir -p "$(dirname "$d")"; mkdir -m 700 "$d" ;; *) mkdir -p "$d" ;; esac; fi
cat > "$t"
if [ -f "$f" ] && cmp -s "$t" "$f"; then rm -f "$t"; echo unchanged; exit 0; fi
chmod "$2" "$t"; mv -f "$t" "$f"; echo written
"""
_LINK = r"""set -e
mkdir -p "$(dirname "$2")"
if [ -L "$2" ] && [ "$(readlink "$2")" = "$1" ]; then echo unchanged; else ln -sfn "$1" "$2"; echo written; fi
"""
_REMOVE = 'if [ -e "$1" ] || [ -L "$1" ]; then rm -f "$1"; echo removed; else echo absent; fi'
# "missing", or "present" then the file's content (status compares it with what install writes).
_READ = 'if [ -L "$1" ]; then echo link; readlink "$1"; elif [ -f "$1" ]; then echo present; cat "$1"; else echo missing; fi'
_ENV_FILE = r"""f="$1"; shift
[ -f "$f" ] || { echo missing; exit 0; }
stat -c '%a %u' "$f"
for n in "$@"; do grep -qE "^(export[[:space:]]+)?$n=" "$f" || echo "unset $n"; done
"""


@dataclass(frozen=True)
class Who:
    user: str
    uid: int
    home: str
    systemd: bool  # systemd is the node's init (daemon-reload, enable, start are possible)


def _check(conn: Connector, argv: list[str], what: str, input: bytes | None = None) -> str:
    res = conn.run(argv, input=input, timeout=TIMEOUT)
    if not res.ok:
        why = (res.stderr or res.stdout).strip().splitlines()
        sudo = argv[:2] == ["sudo", "-n"]
        raise SparkctlError(
            f"{what} failed (exit {res.rc}): {why[-1] if why else 'no output'}",
            node=conn.node,
            fix="allow the node user passwordless sudo for it, or install as root"
            if sudo
            else "see the message above",
        )
    return res.stdout


def who(conn: Connector) -> Who:
    user, uid, home, init = (_check(conn, sh_argv(_WHO), "reading the node user").splitlines() + [""] * 4)[:4]
    return Who(user, int(uid or -1), home, init == "systemd")


def _root(w: Who, path: str, argv: list[str]) -> list[str]:
    """argv as root where the path is outside the user's home and the user is not root."""
    inside = w.home and (path + "/").startswith(w.home.rstrip("/") + "/")
    return argv if w.uid == 0 or inside else ["sudo", "-n", *argv]


def write(conn: Connector, w: Who, path: str, text: str, mode: int) -> str:
    argv = _root(w, path, sh_argv(_WRITE, path, f"{mode:o}"))
    return _check(conn, argv, f"writing {path}", input=text.encode()).strip()


def link(conn: Connector, w: Who, target: str, path: str) -> str:
    return _check(conn, _root(w, path, sh_argv(_LINK, target, path)), f"linking {path}").strip()


def remove(conn: Connector, w: Who, path: str) -> str:
    return _check(conn, _root(w, path, sh_argv(_REMOVE, path)), f"removing {path}").strip()


def prune(conn: Connector, w: Who, dirs: list[str]) -> None:
    """Remove each directory if it is empty now (never one that holds anything)."""
    conn.run(
        _root(w, dirs[0], sh_argv('for d in "$@"; do rmdir "$d" 2>/dev/null; done; true', *dirs)),
        timeout=TIMEOUT,
    )


def read(conn: Connector, path: str) -> tuple[str, str]:
    """("missing" | "present" | "link", content or link target)."""
    out = _check(conn, sh_argv(_READ, path), f"reading {path}")
    kind, _, rest = out.partition("\n")
    return kind, rest.rstrip("\n") if kind == "link" else rest


def systemctl(conn: Connector, w: Who, *args: str) -> str:
    """systemctl's answer; as root (sudo -n) for what changes the system, not for `is-active`."""
    root = w.uid == 0 or args[:1] == ("is-active",)
    argv = ["systemctl", *args] if root else ["sudo", "-n", "systemctl", *args]
    res = conn.run(argv, timeout=TIMEOUT)
    return (res.stdout or res.stderr).strip()


def env_file_problem(conn: Connector, w: Who, path: str, names: list[str]) -> str | None:
    """Why the EnvironmentFile cannot be used (None: fine): missing, readable by others, another
    owner's, or lacking a variable the profile's `env:` secrets name. Values never leave the node."""
    out = _check(conn, sh_argv(_ENV_FILE, path, *names), f"checking {path}").split()
    if out[:1] == ["missing"]:
        return f"{path} does not exist"
    mode, uid, unset = int(out[0], 8), int(out[1]), out[3::2]
    if mode & 0o077:
        return f"{path} is mode {mode:o}: readable by others"
    if uid not in (w.uid, 0):
        return f"{path} belongs to uid {uid}, not {w.user}"
    if unset:
        return f"{path} sets no {', '.join(unset)}"
    return None
