"""The gateway's owner check as rendered (the testbed runs it: test_gateway_squatter.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sparkctl.planning import gateway as gw
from sparkctl.planning.gateway_owner import OWNER_PATH, owner_lua


def test_the_task_compares_listeners_of_the_port_in_hex_against_the_uid() -> None:
    lua = owner_lua(20000, 1000)
    assert 'local PORT, UID = "4E20", "1000"' in lua  # /proc/net/tcp writes ports in hex
    assert '"/proc/net/tcp"' in lua and '"/proc/net/tcp6"' in lua  # a squatter on [::] too
    assert 'fields[4] == "0A"' in lua  # LISTEN sockets only
    assert "sv:set_maint()" in lua and "sv:set_ready()" in lua and "port 20000 is held by uid" in lua


def test_the_server_starts_in_maintenance_only_with_the_check() -> None:
    spec = gw.GatewaySpec("n", "127.0.0.1", 30000, "127.0.0.1", 20000)
    checked = gw.haproxy_config(spec, owner_uid=0)
    assert f"    lua-load {OWNER_PATH}" in checked and checked.rstrip().splitlines()[-1].endswith(" disabled")
    plain = gw.haproxy_config(spec)
    assert "lua-load" not in plain and " disabled" not in plain


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy (Debian) not installed")
def test_haproxy_loads_the_task(tmp_path: Path) -> None:
    spec = gw.GatewaySpec("n", "127.0.0.1", 30000, "127.0.0.1", 20000)
    (tmp_path / "owner.lua").write_text(owner_lua(20000, 0))
    cfg = tmp_path / "h.cfg"
    cfg.write_text(gw.haproxy_config(spec, owner_uid=0).replace(OWNER_PATH, str(tmp_path / "owner.lua")))
    out = subprocess.run(["haproxy", "-c", "-f", str(cfg)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
