"""Secret values (HF_TOKEN, API keys): referenced in plans, masked everywhere, resolved only at the transport.

A `SecretRef` is what a plan holds: it renders as `***` (str/repr/JSON) and its value is only
read by `reveal()`/`reveal_on()`, which the container-start code calls when it writes the secret
files into the created container (Docker API request body, never a command line or env var).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkctl.errors import UsageError

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector

MASK = "***"
_FILE_VALUES: dict[tuple[str, str], str] = {}  # (node, path) -> value read this run (never persisted)


@dataclass(frozen=True)
class SecretRef:
    name: str
    env: str | None = None  # the controller's environment variable holding the value
    file: str | None = None  # or a file on a node (absolute path there)
    node: str | None = None  # the node holding `file`

    def __str__(self) -> str:
        return MASK

    def __repr__(self) -> str:
        return f"SecretRef({self.name}, from {self.source})"

    @property
    def source(self) -> str:
        return f"${self.env}" if self.env else f"file {self.file}"

    def describe(self) -> str:
        return f"{MASK} (from {self.source})"

    def reveal_on(self, conn: Connector | None) -> str:
        """The value: from this shell's env, or read from the file on the node behind `conn`."""
        if self.env:
            return self.reveal()
        if conn is None:
            raise UsageError(f"secret {self.name} is in {self.file} on the nodes; no node to read it from")
        cached = _FILE_VALUES.get((conn.node, self.file or ""))
        if cached:
            return cached
        try:
            value = conn.get(self.file or "").decode(errors="replace").strip()
        except (OSError, FileNotFoundError) as exc:
            raise UsageError(
                f"cannot read secret {self.name} from {self.file}: {exc}",
                node=conn.node,
                fix="create the file (mode 0400) on every node, or use env: in the profile",
            ) from None
        if not value:
            raise UsageError(f"secret file {self.file} is empty", node=conn.node)
        _FILE_VALUES[(conn.node, self.file or "")] = value
        return value

    def known_value(self) -> str | None:
        """The value without any I/O: from this shell's env, or a file value read earlier in this run."""
        if self.env:
            return os.environ.get(self.env) or None
        return _FILE_VALUES.get((self.node or "", self.file or ""))

    def reveal(self) -> str:
        if not self.env:
            raise UsageError(f"secret {self.name} lives in a file on the nodes; it is read there")
        value = os.environ.get(self.env)
        if not value:
            raise UsageError(
                f"secret {self.name} is read from ${self.env}, which is not set",
                fix=f"export {self.env}=... in the shell that runs sparkctl, or use a token file",
            )
        return value


def masked(value: str | SecretRef) -> str:
    return value.describe() if isinstance(value, SecretRef) else value


def reveal(value: str | SecretRef) -> str:
    return value.reveal() if isinstance(value, SecretRef) else value


@dataclass(frozen=True)
class SecretFile:
    """A secret the container reads from a file: written into the created container before it
    starts (`bind=False`; never on argv or in env; the file lies in the container's writable layer
    under the engine's data root, root-only, removed with the container) or bind-mounted read-only
    from the node (`bind=True`). Entries sharing a target with a `yaml_key` form one YAML file
    (the engine's key file)."""

    target: str
    ref: SecretRef
    yaml_key: str | None = None
    bind: bool = False


def render_files(files: Iterable[SecretFile], conn: Connector | None) -> dict[str, bytes]:
    """{container path: content} of the files to write into a container (values revealed here)."""
    out: dict[str, list[str]] = {}
    for f in files:
        if f.bind:
            continue
        value = f.ref.reveal_on(conn)
        # JSON strings are valid YAML double-quoted scalars: any character survives.
        line = f"{f.yaml_key}: {json.dumps(value)}\n" if f.yaml_key else value
        out.setdefault(f.target, []).append(line)
    return {target: "".join(parts).encode() for target, parts in out.items()}


def secret_values(refs: Iterable[SecretRef], conn: Connector | None) -> list[str]:
    """The values the profile's sources hold now (for masking), skipping any that cannot be read."""
    values: list[str] = []
    for ref in refs:
        try:
            value = ref.reveal_on(conn) if ref.file else os.environ.get(ref.env or "", "")
        except UsageError:
            continue
        if value:
            values.append(value)
    return values


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
