"""HostIpReachable names the engine's own host-IP variable (Engine.host_ip_env) in its findings."""

from __future__ import annotations

from sparkctl.facts.net import Netdev
from sparkctl.preflight.checks.hostip import check_host_ip


def _netdev(name: str, ip: str) -> Netdev:
    return Netdev(name=name, mtu=1500, operstate="UP", ipv4=(f"{ip}/24",))


def test_an_unassigned_address_names_the_engines_variable() -> None:
    for env in ("SGLANG_HOST_IP", "VLLM_HOST_IP"):
        (f,) = check_host_ip(1, "spark2", "10.0.0.9", {"eth0": _netdev("eth0", "10.0.0.2")}, [], {}, env=env)
        assert f.severity == "error" and f.message.startswith(f"{env} 10.0.0.9 of rank 1 is not assigned")
        assert f"fix the {env} override" in (f.fix or "")
