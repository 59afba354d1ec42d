"""Find and read a profile YAML into a validated `Profile` (errors: file:line: key.path + fix)."""

from __future__ import annotations

import os
from pathlib import Path

from sparkctl.errors import ProfileError
from sparkctl.profile.schema import Profile
from sparkctl.yaml_model import decode_yaml, load_yaml_model

DEFAULT_NAME = "sparkctl.yaml"


def find_profile(explicit: Path | None) -> Path:
    """--profile/-p (or $SPARKCTL_PROFILE, filled in by the CLI), else ./sparkctl.yaml."""
    if explicit is not None:
        if not explicit.is_file():
            raise ProfileError(
                f"profile not found: {explicit}",
                fix="check the path given with -p/--profile or $SPARKCTL_PROFILE",
            )
        return explicit
    env = os.environ.get("SPARKCTL_PROFILE")
    if env:
        return find_profile(Path(env))
    local = Path.cwd() / DEFAULT_NAME
    if local.is_file():
        return local
    raise ProfileError(
        "no cluster profile given",
        fix=f"pass -p FILE, set SPARKCTL_PROFILE, or create ./{DEFAULT_NAME} "
        "(examples in profiles/, or run `sparkctl init`)",
    )


def load_profile_text(text: str, source: str = "<profile>") -> Profile:
    return load_yaml_model(
        text, source, Profile, ProfileError, "the profile (cluster:, nodes:, modes: ...)", "docs/profile.md"
    )


def load_profile_file(path: Path) -> Profile:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ProfileError(f"cannot read profile {path}: {exc.strerror}") from None
    return load_profile_text(decode_yaml(data, str(path), ProfileError), str(path))
