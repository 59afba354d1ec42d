"""planning/fleet_endpoint.py: the fleet's one endpoint as planned from every service's modes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sparkctl.planning.build import build_plan
from sparkctl.planning.fleet_endpoint import fleet_gateway_spec, fleet_url
from sparkctl.planning.fleet_gateway import fleet_haproxy_config
from sparkctl.planning.fleet_view import service_views
from sparkctl.planning.model import PlanFacts
from sparkctl.profile import load_profile_file

ROOT = Path(__file__).resolve().parents[3]
SPARKS = load_profile_file(ROOT / "profiles" / "fleet-two-sparks.yaml")
FACTS = PlanFacts(addresses={"spark2": ("192.168.100.12", "test")})


def spec(prof=SPARKS):
    views = service_views(prof)
    plans = {n: [build_plan(v, m, FACTS) for m in v.modes] for n, v in views.items()}
    return fleet_gateway_spec(prof, views, plans, FACTS)


def test_each_service_is_routed_by_its_served_name_and_its_name_to_every_modes_api() -> None:
    s = spec()
    chat, coder = s.routes
    assert coder.names == ("qwen2.5-coder-7b",)  # the served name: what the engine is asked for
    assert chat.names[0] == build_plan(service_views(SPARKS)["chat"], "tp2").endpoint.served_model_name
    # chat's tp2 and solo both have their API on spark1 (local: loopback): one server
    assert chat.upstreams == (("127.0.0.1", 8888),)
    assert coder.upstreams == (("192.168.100.12", 30000),)  # spark2 by the IP its name has there
    assert not chat.on_demand and not coder.on_demand


def test_every_key_passes_the_front_and_the_engine_keys_read_the_state() -> None:
    s = spec()
    assert s.keyed and s.keys and s.operators
    assert set(s.operators) <= set(s.keys)
    assert (s.node, s.port, s.wait_s) == ("spark1", 8000, 300)  # gateway: defaults
    assert fleet_url(SPARKS, s) == "http://127.0.0.1:8000"  # spark1 is `address: local`


def test_an_on_demand_service_and_another_gateway_port_are_planned() -> None:
    data = (ROOT / "profiles" / "fleet-two-sparks.yaml").read_text()
    data = data.replace("models:\n", "gateway: {port: 8100}\nmodels:\n", 1)
    data = data.replace(
        "    modes:\n      solo:\n        nodes: [spark2]",
        "    on_demand: true\n    modes:\n      solo:\n        nodes: [spark2]",
        1,
    )
    from sparkctl.profile import load_profile_text

    s = spec(load_profile_text(data))
    assert s.port == 8100 and [r.on_demand for r in s.routes] == [False, True]


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy (Debian) not installed")
def test_haproxy_takes_the_shipped_fleets_gateway(tmp_path: Path) -> None:
    from sparkctl.planning.fleet_gateway import fleet_files

    s = spec()
    files = fleet_files(s)
    cfg = fleet_haproxy_config(s)
    for path, text in files.items():  # the container's paths, placed under tmp_path
        local = tmp_path / path.lstrip("/")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(text)
        cfg = cfg.replace(path, str(local))
    for path in ("/run/sparkctl-gateway/keys.sha256", "/run/sparkctl-gateway/operators.sha256"):
        local = tmp_path / path.lstrip("/")
        local.write_text("0" * 64 + "\n")
        cfg = cfg.replace(path, str(local))
    (tmp_path / "h.cfg").write_text(cfg)
    out = subprocess.run(["haproxy", "-c", "-f", str(tmp_path / "h.cfg")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
