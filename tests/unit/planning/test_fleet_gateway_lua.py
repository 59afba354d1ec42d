"""The fleet gateway's Lua as rendered (it runs in tests/unit/planning/test_fleet_gateway.py's live
tests under the real haproxy)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sparkctl.planning.fleet_gateway_lua import POLL_MS, SERVER, fleet_lua, lua_string


def test_names_become_lua_literals_with_every_odd_byte_escaped() -> None:
    assert lua_string("org/model-7b:q4") == '"org/model-7b:q4"'
    assert lua_string('a"b\\c\n') == '"a\\034b\\092c\\010"'
    assert lua_string("é") == '"\\195\\169"'


def test_the_routes_wait_and_server_are_filled_in() -> None:
    lua = fleet_lua([("chat", "chat-model", False), ("code", "org/coder", True)], 45)
    assert '  {service = "chat", id = "chat-model", on_demand = false},' in lua
    assert '  {service = "code", id = "org/coder", on_demand = true},' in lua
    assert f'local WAIT_S, POLL_MS, SERVER = 45, {POLL_MS}, "{SERVER}"' in lua
    assert "@" not in lua.replace("org/coder", "")
    for name in ("fleet_wait", "fleet_models", "fleet_state"):
        assert f'"{name}"' in lua


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy (Debian) not installed")
def test_haproxy_loads_the_lua_with_an_odd_name(tmp_path: Path) -> None:
    lua = tmp_path / "f.lua"
    lua.write_text(fleet_lua([("chat", 'we"ird\\', True)], 1))
    cfg = tmp_path / "h.cfg"
    cfg.write_text(f"global\n    lua-load {lua}\n    nbthread 1\n")
    out = subprocess.run(["haproxy", "-c", "-f", str(cfg)], capture_output=True, text=True, check=False)
    assert "has no error" in out.stdout and "ALERT" not in out.stderr, (
        out.stdout + out.stderr
    )  # no listener: 2
