"""Find and read a profile YAML into a validated `Profile` (errors: file:line: key.path + fix)."""

from __future__ import annotations

import os
from pathlib import Path

from sparkctl.errors import ProfileError, SparkctlError
from sparkctl.profile.schema import Profile
from sparkctl.yaml_compose import key_line
from sparkctl.yaml_model import decode_yaml, load_yaml_model

DEFAULT_NAME = "sparkctl.yaml"


def find_profile(explicit: Path | None) -> Path:
    """--profile/-p (or $SPARKCTL_PROFILE, filled in by the CLI), else ./sparkctl.yaml."""
    if explicit is not None:
        if explicit.is_dir():
            raise ProfileError(
                f"{explicit} is a directory, not a profile file",
                fix=f"give the YAML file in it: -p {explicit / DEFAULT_NAME} (or one of profiles/*.yaml)",
            )
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


MAX_PROFILE_BYTES = 16 << 20  # a profile is a few KB; 60,000 args are 1.5 MB


def load_profile_file(path: Path) -> Profile:
    try:
        size = path.stat().st_size
        if size > MAX_PROFILE_BYTES:
            raise ProfileError(
                f"{path}: {size >> 20} MB is not a profile (sparkctl reads at most {MAX_PROFILE_BYTES >> 20} MB)",
                fix="give the profile's YAML file (a few KB; profiles/*.yaml are examples)",
            )
        data = path.read_bytes()
    except OSError as exc:
        raise ProfileError(
            f"cannot read profile {path}: {exc.strerror}",
            fix=f"check that it is a file you may read (`ls -l {path}`)",
        ) from None
    return load_profile_text(decode_yaml(data, str(path), ProfileError), str(path))


def place_in_profile(error: SparkctlError, path: Path) -> None:
    """A refusal found after the profile loaded (the plan: a managed flag in engine.args, env that
    replaces sparkctl's) that starts with a key path of `path` gets that file and line in front,
    as the loader's own errors have them. The others (and every error of `also`) are left as they are."""
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return
    for one in [error, *error.also]:
        if isinstance(one, ProfileError) and not one.message.startswith(f"{path}:"):
            line = key_line(text, one.message)
            if line is not None:
                one.message = f"{path}:{line}: {one.message}"
