"""A rank's secret files: read (through the one resolver) into a tar, placed on the node's tmpfs
and bind-mounted read-only into its container, removed with it. Never a disk, argv, env or
`docker inspect`."""

from __future__ import annotations

import contextlib
import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkctl.errors import SparkctlError
from sparkctl.secrets import secret_values

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector
    from sparkctl.planning.build import RankSpec


@dataclass(frozen=True)
class Sealed:
    """A rank's secrets read once per `up`: the tar its container's files are placed from, and
    the values its log is masked with."""

    tar: bytes | None
    masks: tuple[str, ...]


def seal(spec: RankSpec, conn: Connector | None) -> Sealed:
    """Read the rank's secrets (UsageError on a missing one: before anything is stopped)."""
    return Sealed(secrets_tar(spec, conn), tuple(secret_values(spec.secret_refs(), conn)))


def secrets_tar(spec: RankSpec, conn: Connector | None) -> bytes | None:
    """The rank's secret files (values revealed here) as a tar of their names: 0400."""
    import io
    import tarfile

    from sparkctl.secrets import render_files

    files = {**render_files(spec.secrets, conn), **{p: t.encode() for p, t in spec.files.items()}}
    if not files:
        return None
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(posixpath.basename(path))
            info.size, info.mode = len(data), 0o400
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


# Secrets live on the node's /dev/shm (a tmpfs, checked: never on a disk, gone at reboot), in a 0700
# directory of the node user that is checked to be theirs (a directory another user pre-created
# in the sticky /dev/shm is refused), one subdirectory per container, bind-mounted read-only file
# by file at their /run/secrets paths. $1 = the container name; $2 = the UID:GID the engine runs as
# when not the node user's (the files are handed to it: only root may); the tar arrives on stdin.
SECRETS_ROOT = '/dev/shm/sparkctl-"$(id -u)"'
_SECRETS_SCRIPT = (
    '[ "$(stat -f -c %T /dev/shm)" = tmpfs ] || { echo "/dev/shm is not a tmpfs" >&2; exit 3; }; '
    f'umask 077; d={SECRETS_ROOT}; mkdir -m 700 "$d" 2>/dev/null; '
    '[ -d "$d" ] && [ ! -L "$d" ] && [ "$(stat -c %u "$d")" = "$(id -u)" ] '
    '|| { echo "$d is not a directory of this user" >&2; exit 3; }; chmod 700 "$d" && '
    'r="$d/$1" && rm -rf -- "$r" && mkdir -m 700 -- "$r" && tar -x -C "$r" -f - && '
    '{ [ -z "$2" ] || chown -- "$2" "$r"/* || { rm -rf -- "$r"; exit 4; }; } && printf %s "$r"'
)
SECRETS_NOT_GIVEN = 4  # the node user could not hand the files to the engine's uid
_SECRETS_DROP = f'rm -rf -- {SECRETS_ROOT}/"$1"'


def place_secrets(conn: Connector, spec: RankSpec, tar: bytes, owner: str = "") -> list[Any]:
    """Write the secret files on the node's tmpfs (handed to `owner`, the engine's UID:GID, when
    given); the read-only bind mounts that place them."""
    from docker.types import Mount

    argv = ["sh", "-c", _SECRETS_SCRIPT, "sparkctl-secrets", spec.container_name, owner]
    res = conn.run(argv, input=tar)
    if res.rc == SECRETS_NOT_GIVEN:
        raise SparkctlError(
            f"engine.container.user {owner}: the node user cannot hand the secret files to that uid "
            "(only root can chown)",
            fix="set engine.container.user: node (the node user's own uid), or connect to the node as root",
            node=spec.node,
            rank=spec.rank if spec.role == "engine" else None,
        )
    res.check(
        "placing the secret files in /dev/shm",
        fix="the node needs /dev/shm mounted as a tmpfs the node user can write, and `tar`",
    )
    where = res.stdout.strip()
    targets = {posixpath.basename(f.target): f.target for f in spec.secrets if not f.bind}
    targets |= {posixpath.basename(path): path for path in spec.files}
    return [
        Mount(target=target, source=f"{where}/{name}", type="bind", read_only=True)
        for name, target in sorted(targets.items())
    ]


def drop_secrets(conn: Connector, name: str) -> None:
    """The container's secret files on the node's tmpfs go with it (best effort: the next start of
    that name replaces them, a reboot empties /dev/shm)."""
    with contextlib.suppress(Exception):
        conn.run(["sh", "-c", _SECRETS_DROP, "sparkctl-secrets", name], timeout=30)
