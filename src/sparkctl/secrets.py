"""Secret values (HF_TOKEN...): referenced in plans, masked everywhere, resolved only at the transport.

A `SecretRef` is what a plan holds: it renders as `***` (str/repr/JSON) and its value is only
read by `reveal()`, which the container-start code calls when it builds the Docker API request
(never a command line).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sparkctl.errors import UsageError

MASK = "***"


@dataclass(frozen=True)
class SecretRef:
    name: str
    env: str  # the controller's environment variable holding the value

    def __str__(self) -> str:
        return MASK

    def __repr__(self) -> str:
        return f"SecretRef({self.name}, from ${self.env})"

    def describe(self) -> str:
        return f"{MASK} (from ${self.env})"

    def reveal(self) -> str:
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


def redact(text: str, env: dict[str, str | SecretRef]) -> str:
    """Replace any revealed secret value found in `text` (logs, errors) by the mask."""
    for value in env.values():
        if isinstance(value, SecretRef):
            secret = os.environ.get(value.env)
            if secret and len(secret) >= 4:
                text = text.replace(secret, MASK)
    return text
