"""The fleet gateway's container as planned (pure)."""

from __future__ import annotations

from dataclasses import replace

from sparkctl.planning import fleet_gateway as fg
from sparkctl.planning import gateway as gw
from sparkctl.planning.fleet_gateway_container import ROLE, fleet_gateway_container
from sparkctl.secrets import SecretRef

KEY = SecretRef(name="api-key", env="SPARKCTL_API_KEY")
LABELS = {"sparkctl.cluster": "lab"}


def spec(**kw: object) -> fg.FleetGatewaySpec:
    routes = (
        fg.FleetRoute("chat", ("chat-model", "chat"), (("10.0.0.1", 8000),)),
        fg.FleetRoute("code", ("coder", "code"), (("10.0.0.2", 8001),), on_demand=True),
    )
    base: dict = {"routes": routes, "keyed": True, "keys": (KEY,), "operators": (KEY,)}
    return fg.FleetGatewaySpec("spark1", "10.0.0.1", 9000, **(base | kw))


def test_the_container_is_least_privilege_and_holds_its_files_and_hashes() -> None:
    c = fleet_gateway_container(spec(), "lab", LABELS)
    assert c.container_name == "sparkctl-lab-gateway" and c.role == ROLE == "fleet-gateway"
    assert (c.rank, c.group, c.node_rank, c.gpus, c.node) == (0, 0, 0, 0, "spark1")
    o = c.options
    assert o.cap_drop == ["ALL"] and not o.cap_add and not o.privileged and o.gpus is None
    assert o.read_only and o.user == "node" and "no-new-privileges:true" in o.security_opt
    assert c.argv == ["haproxy", "-db", "-f", gw.CONFIG_PATH] and c.env == {} and c.mounts == []
    assert c.files == fg.fleet_files(spec()) and c.secrets == fg.fleet_key_files(spec())
    assert c.labels["sparkctl.role"] == ROLE and c.labels["sparkctl.cluster"] == "lab"
    assert c.image == gw.GATEWAY_IMAGE


def test_a_changed_fleet_changes_the_config_hash() -> None:
    def digest(s: fg.FleetGatewaySpec) -> str:
        return fleet_gateway_container(s, "lab", LABELS).labels["sparkctl.config_hash"]

    base = digest(spec())
    assert digest(spec()) == base
    other = (fg.FleetRoute("chat", ("chat-model", "chat"), (("10.0.0.1", 8002),)),)
    changed = [
        spec(routes=other),
        spec(wait_s=10),
        spec(keys=(KEY, SecretRef(name="api-key-b", env="B"))),
        spec(image="other:1"),
        spec(bounds=replace(fg.FLEET_BOUNDS, max_body_bytes=1000)),
    ]
    assert len({base, *(digest(s) for s in changed)}) == len(changed) + 1
