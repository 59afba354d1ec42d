"""Secret values (HF_TOKEN, API keys): referenced in plans, masked everywhere, resolved only at the transport.

A `SecretRef` is what a plan holds: it renders as `***` (str/repr/JSON) and its value is only
read by `resolve` (or `resolve_known`, which tolerates a value it cannot read): the one resolver,
used where the secret files are written for a container (never a command line or env var), by
the router's and readiness' clients, and by verify/bench (`local_ref`: the profile's secret read
on this machine).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkctl.errors import SparkctlError, UsageError

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector
    from sparkctl.profile.schema import Secret

MASK = "***"
_FILE_VALUES: dict[tuple[str, str], str] = {}  # (node, path) -> value read this run (never persisted)


@dataclass(frozen=True)
class SecretRef:
    name: str
    env: str | None = None  # the controller's environment variable holding the value
    file: str | None = None  # or a file on a node (absolute path there)
    node: str | None = None  # the node holding `file` (None: this machine)

    def __str__(self) -> str:
        return MASK

    def __repr__(self) -> str:
        return f"SecretRef({self.name}, from {self.source})"

    @property
    def source(self) -> str:
        return f"${self.env}" if self.env else f"file {self.file}"

    def describe(self) -> str:
        return f"{MASK} (from {self.source})"


def resolve(ref: SecretRef, conn: Connector | None = None) -> str:
    """The secret's value: this shell's variable, or its file on the node behind `conn` (on this
    machine when the ref names no node). A file is read once per run per node and path: later
    calls need no connection. UsageError naming the secret (and node) when it cannot be read."""
    if ref.env:
        value = os.environ.get(ref.env)
        if not value:
            raise UsageError(
                f"secret {ref.name} is read from ${ref.env}, which is not set",
                fix=f"export {ref.env}=... in the shell that runs sparkctl, or use a token file",
            )
        return value
    node = conn.node if conn is not None else ref.node
    key = (node or "", ref.file or "")
    if key in _FILE_VALUES:
        return _FILE_VALUES[key]
    if conn is None and ref.node is not None:
        raise UsageError(f"secret {ref.name} is in {ref.file} on {ref.node}; no connection to read it from")
    try:
        raw = conn.get(ref.file or "") if conn is not None else Path(ref.file or "").expanduser().read_bytes()
    except OSError as exc:
        raise UsageError(
            f"cannot read secret {ref.name} from {ref.file}: {exc}",
            node=node,
            fix="create the file (mode 0400) on every node, or use env: in the profile",
        ) from None
    value = raw.decode(errors="replace").strip()
    if not value:
        raise UsageError(f"secret file {ref.file} is empty", node=node)
    _FILE_VALUES[key] = value
    return value


def resolve_known(ref: SecretRef | None, conn: Connector | None = None) -> str | None:
    """`resolve`, or None when there is no ref or its value cannot be read now (a probe sends the
    key when it has one; without `conn`, a file-held value only if read earlier in this run)."""
    if ref is None:
        return None
    try:
        return resolve(ref, conn)
    except SparkctlError:
        return None


def local_ref(name: str, secret: Secret | None) -> SecretRef | None:
    """The profile's secret as read on this machine (`verify` and `bench` talk from here)."""
    if secret is None:
        return None
    return SecretRef(name=name, env=secret.env) if secret.env else SecretRef(name=name, file=secret.file)


def masked(value: str | SecretRef) -> str:
    return value.describe() if isinstance(value, SecretRef) else value


def reveal(value: str | SecretRef) -> str:
    return resolve(value) if isinstance(value, SecretRef) else value


@dataclass(frozen=True)
class SecretFile:
    """A secret the container reads from a file: written into the created container before it
    starts (`bind=False`; never on argv or in env; the file lies in the container's writable layer
    under the engine's data root, root-only, removed with the container) or bind-mounted read-only
    from the node (`bind=True`). Entries sharing a target with a `yaml_key` form one YAML file
    (the engine's key file). `hashed`: the file holds sha256 of "Bearer <value>" instead of the
    value (the gateway's key file: it compares the hash of a client's whole header)."""

    target: str
    ref: SecretRef
    yaml_key: str | None = None
    bind: bool = False
    hashed: bool = False
    # the file's line for this entry, `{hash}`/`{value}` filled in (the gateway's maps: a key's
    # hash and its name; the engine's own header for a client holding a named key)
    line: str | None = None


def bearer_sha256(key: str) -> str:
    """The gateway's key-file line for `key`: sha256 of the whole Authorization header value."""
    import hashlib

    return hashlib.sha256(f"Bearer {key}".encode()).hexdigest()


def render_files(files: Iterable[SecretFile], conn: Connector | None) -> dict[str, bytes]:
    """{container path: content} of the files to write into a container (values revealed here)."""
    out: dict[str, list[str]] = {}
    for f in files:
        if f.bind:
            continue
        value = resolve(f.ref, conn)
        if f.line is not None:  # replace, not format: a value with braces stays as it is
            text = f.line.replace("{hash}", bearer_sha256(value)) if "{hash}" in f.line else f.line
            out.setdefault(f.target, []).append(text.replace("{value}", value) + "\n")
            continue
        if f.hashed:
            out.setdefault(f.target, []).append(bearer_sha256(value) + "\n")
            continue
        # JSON strings are valid YAML double-quoted scalars: any character survives.
        line = f"{f.yaml_key}: {json.dumps(value)}\n" if f.yaml_key else value
        out.setdefault(f.target, []).append(line)
    return {target: "".join(parts).encode() for target, parts in out.items()}


def secret_values(refs: Iterable[SecretRef], conn: Connector | None) -> list[str]:
    """The values the profile's sources hold now (for masking), skipping any that cannot be read."""
    return [v for v in (resolve_known(ref, conn) for ref in refs) if v]


# Below this length a value is masked only where it stands alone (not inside a longer word):
# masking "ab" inside every word would garble the log, leaving it unmasked would leak it.
SHORT = 4


def mask_forms(values: Iterable[str]) -> tuple[list[str], list[str]]:
    """(long forms, short forms) of each value as a log may show it: as is, repr-escaped (a
    Python repr of the engine's settings: `\\` and `\\'` escapes) and JSON-escaped; longest first."""
    forms: set[str] = set()
    for v in values:
        forms |= {v, repr(v)[1:-1], json.dumps(v)[1:-1], v.replace("\\", "\\\\").replace("'", "\\'")}
    ordered = sorted((f for f in forms if f), key=len, reverse=True)
    return [f for f in ordered if len(f) >= SHORT], [f for f in ordered if len(f) < SHORT]


def redact(text: str, values: Iterable[str]) -> str:
    """Replace any secret value found in `text` (logs, errors) by the mask, escaped forms included."""
    import re

    long, short = mask_forms(values)
    for form in long:
        text = text.replace(form, MASK)
    for form in short:
        text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(form)}(?![A-Za-z0-9])", MASK, text)
    return text
