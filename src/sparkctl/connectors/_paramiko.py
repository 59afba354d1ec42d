"""paramiko, imported without `invoke`: paramiko.config imports it (~40 ms, half of paramiko's import
time, measured here) only to run `Match exec` lines of ~/.ssh/config. `lookup()` imports it for real
when a config has one (see `ssh_config_lookup`)."""

from __future__ import annotations

import sys

if "paramiko" not in sys.modules and "invoke" not in sys.modules:
    sys.modules["invoke"] = None  # type: ignore[assignment]  # makes `import invoke` fail at once
    try:
        import paramiko
    finally:
        del sys.modules["invoke"]
import paramiko  # noqa: E402


def ssh_config_lookup(path: str, host: str) -> dict:
    """`~/.ssh/config` values for host; a `Match exec` line gets paramiko's invoke after all."""
    parsed = paramiko.SSHConfig.from_path(path)
    try:
        return parsed.lookup(host)
    except ImportError:
        if paramiko.config.invoke is not None:
            raise
        import invoke  # a `Match exec` line: paramiko runs it with invoke

        paramiko.config.invoke = invoke
        return parsed.lookup(host)
