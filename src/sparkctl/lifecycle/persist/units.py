"""The systemd units `sparkctl persist` installs, as text (pure: no I/O).

System units with `User=` the node user, not user units with lingering: a user manager cannot
order a unit after `docker.service` or `network-online.target` (those are the system manager's;
a user instance has neither), so a user unit may start the supervisor before Docker or the
network is up. A system unit waits for both and starts at boot with no login; `User=` keeps
the process the node user's, as the one `up` starts is (docs/operations.md)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

UNIT_DIR = "/etc/systemd/system"
WANTED_BY = "multi-user.target"
# The guard's own directory under the node user's home (lifecycle/guard.py GUARD_DIR): the unit's
# guard runs the very program file `up` starts (same name, same lock and state), so `status` sees it
# and a supervisor's start keeps it instead of starting a second one.
GUARD_DIR = ".local/state/sparkctl/guard"
RESTART_SEC = 10
START_LIMIT_INTERVAL = 600
START_LIMIT_BURST = 10


@dataclass(frozen=True)
class UnitFile:
    """A file persist writes on a node: a unit (enabled through its `.wants` link) or a data file."""

    node: str
    path: str
    text: str
    mode: int = 0o644
    enable: bool = False  # a unit that gets the multi-user.target.wants link

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


def supervisor_unit_name(cluster: str) -> str:
    return f"sparkctl-supervise-{cluster}.service"


def guard_unit_name(cluster: str) -> str:
    return f"sparkctl-memguard-{cluster}.service"


def _escape(word: str) -> str:
    """One ExecStart word: systemd splits on spaces, reads quotes and expands `$` and `%`."""
    word = word.replace("%", "%%").replace("$", "$$")
    if word and all(c.isalnum() or c in "/._-:=+@," for c in word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _exec(argv: list[str]) -> str:
    return " ".join(_escape(a) for a in argv)


def _common_unit(description: str) -> str:
    return (
        "[Unit]\n"
        f"Description={description}\n"
        "Wants=network-online.target docker.service\n"
        "After=network-online.target docker.service\n"
        f"StartLimitIntervalSec={START_LIMIT_INTERVAL}\n"
        f"StartLimitBurst={START_LIMIT_BURST}\n"
    )


def supervisor_unit(
    cluster: str,
    mode: str,
    user: str,
    sparkctl: list[str],
    profile_path: str,
    env_file: str | None,
    state_home: str | None = None,
) -> str:
    """The controller's unit: `sparkctl supervise MODE -p PROFILE` in the foreground, restarted
    whenever it ends; reconciles the cluster at start (containers gone after a reboot)."""
    env = f"EnvironmentFile={env_file}\n" if env_file else ""
    state = f"Environment={_escape('XDG_STATE_HOME=' + state_home)}\n" if state_home else ""
    return (
        _common_unit(f"sparkctl supervisor of cluster {cluster}, mode {mode}") + "\n[Service]\n"
        "Type=simple\n"
        f"User={user}\n"
        f"{env}{state}"
        "Environment=PYTHONUNBUFFERED=1\n"
        f"ExecStart={_exec([*sparkctl, 'supervise', mode, '--wait', '-p', profile_path])}\n"
        "Restart=always\n"
        f"RestartSec={RESTART_SEC}\n"
        "KillMode=mixed\n"
        "TimeoutStopSec=90\n"
        "NoNewPrivileges=yes\n"
        f"\n[Install]\nWantedBy={WANTED_BY}\n"
    )


def guard_unit(cluster: str, user: str, python: str, program: str, config: str, digest: str) -> str:
    """A node's memory guard in the foreground (`memguard.py run CONFIG`); it only ever kills
    containers labelled with this cluster. The config is read from its file at each start."""
    # The file runs only while its bytes are the ones sparkctl wrote (its sha256 is in the name of
    # the program: lifecycle/guard.py digest), as the guard `up` starts runs only from them.
    script = (
        'test "$(sha256sum < "$1")" = "$3  -" '
        '|| { echo "sparkctl guard: $1 does not match its digest" >&2; exit 1; }; '
        'exec "$0" -S "$1" run "$(cat "$2")"'
    )
    return (
        _common_unit(f"sparkctl memory guard of cluster {cluster}") + "\n[Service]\n"
        "Type=simple\n"
        f"User={user}\n"
        f"ExecStart={_exec(['/bin/sh', '-c', script, python, program, config, digest])}\n"
        "Restart=always\n"
        f"RestartSec={RESTART_SEC}\n"
        "NoNewPrivileges=yes\n"
        f"\n[Install]\nWantedBy={WANTED_BY}\n"
    )


def guard_config_text(config: dict) -> str:
    return json.dumps(config, sort_keys=True) + "\n"


def describe_argv(argv: list[str]) -> str:
    return shlex.join(argv)
