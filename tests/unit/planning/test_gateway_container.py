"""The gateway's container as planned: beside each fronted rank and the router (pure)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from sparkctl.planning import gateway as gw
from sparkctl.planning.build import _config_hash, build_plan
from sparkctl.planning.gateway_container import gateway_container, plan_gateways
from sparkctl.profile import load_profile_text
from sparkctl.secrets import bearer_sha256, render_files

ROOT = Path(__file__).resolve().parents[3]


def _profile(**engine: object) -> object:
    doc = yaml.safe_load((ROOT / "profiles" / "dual-spark.yaml").read_text())
    doc["engine"] |= engine
    return load_profile_text(yaml.safe_dump(doc), "p.yaml")


@pytest.fixture(autouse=True)
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SPARKCTL_API_KEY", "sk-canary-123")


def test_the_gateway_takes_the_ranks_place_with_its_key() -> None:
    plan = build_plan(_profile(port=8888, api_key={"env": "SPARKCTL_API_KEY"}), "solo")
    (g,) = plan_gateways(plan)
    r0 = plan.ranks[0]
    assert g is r0.gateway and (g.node, g.port) == (r0.node, 8888) and g.keyed
    assert (g.upstream_host, g.upstream_port) == ("127.0.0.1", 18888)
    assert r0.argv[r0.argv.index("--port") + 1] == "18888"
    assert g.key is not None and g.key.env == "SPARKCTL_API_KEY"
    assert plan.to_json()["ranks"][0]["gateway"]["key"] == g.key.describe()


def test_the_container_is_least_privilege_and_its_key_file_holds_only_the_hash() -> None:
    plan = build_plan(_profile(api_key={"env": "SPARKCTL_API_KEY"}), "solo")
    r0 = plan.ranks[0]
    c = gateway_container(r0)
    assert c.container_name == f"{r0.container_name}-gateway" and c.role == "gateway" and c.node == r0.node
    o = c.options
    assert o.cap_drop == ["ALL"] and not o.cap_add and not o.privileged and o.gpus is None
    assert o.read_only and o.user == "node" and "no-new-privileges:true" in o.security_opt
    assert o.ulimits["nofile"] > 2 * gw.Bounds().max_connections and o.pids_limit
    files = render_files(c.secrets, None)
    assert files == {gw.KEYS_PATH: (bearer_sha256("sk-canary-123") + "\n").encode()}
    assert "sk-canary-123" not in c.files[gw.CONFIG_PATH] and "sk-canary-123" not in repr(c)
    assert c.argv == ["haproxy", "-db", "-f", gw.CONFIG_PATH] and c.env == {}
    assert (
        c.labels["sparkctl.role"] == "gateway"
        and c.labels["sparkctl.cluster"] == r0.labels["sparkctl.cluster"]
    )
    assert c.labels["sparkctl.config_hash"] != r0.labels["sparkctl.config_hash"]


def test_a_changed_bound_or_key_changes_the_gateways_hash_not_the_ranks() -> None:
    a = gateway_container(build_plan(_profile(api_key={"env": "SPARKCTL_API_KEY"}), "solo").ranks[0])
    b = gateway_container(build_plan(_profile(api_key={"env": "OTHER_KEY"}), "solo").ranks[0])
    assert a.labels["sparkctl.config_hash"] != b.labels["sparkctl.config_hash"]
    # Only what the engine itself sees is in its rank's hash (its argv, env, secrets): a gateway of
    # other bounds or another image (a sparkctl upgrade) is replaced alone, the engine keeps its load.
    plan = build_plan(_profile(api_key={"env": "SPARKCTL_API_KEY"}), "solo")
    r0 = plan.ranks[0]
    assert r0.gateway is not None
    other = replace(r0.gateway, bounds=gw.Bounds(max_body_bytes=1024), image="sparkctl/gateway-haproxy:next")
    moved = replace(plan, ranks=[replace(r0, gateway=other)])
    assert _config_hash(moved.ranks) == _config_hash(plan.ranks)
    assert (
        gateway_container(replace(r0, gateway=other)).labels["sparkctl.config_hash"]
        != gateway_container(r0).labels["sparkctl.config_hash"]
    )


@pytest.mark.parametrize("key", ["gateway", "front"])
def test_no_gateway_when_off(key: str) -> None:
    assert plan_gateways(build_plan(_profile(**{key: False}), "solo")) == []


def test_with_replicas_the_router_and_every_replica_head_get_one() -> None:
    plan = build_plan(_profile(), "dp2")
    assert plan.router is not None and plan.router.gateway is not None
    gates = plan_gateways(plan)
    heads = [r for r in plan.ranks if r.gateway is not None]
    assert len(gates) == 1 + len(heads) == 1 + plan.replicas
    assert (gates[0].node, gates[0].port) == (plan.router.node, plan.endpoint.port)
    router = gateway_container(plan.router)
    assert router.container_name == "sparkctl-" + plan.router.labels["sparkctl.cluster"] + "-router-gateway"
    assert router.rank < 0


def test_named_keys_each_get_a_hash_a_name_and_the_engines_key_in_their_place(monkeypatch) -> None:
    monkeypatch.setenv("ALICE_KEY", "sk-alice-77")
    named = {"alice": {"env": "ALICE_KEY", "per_minute": 30}}
    plan = build_plan(_profile(api_key={"env": "SPARKCTL_API_KEY"}, api_keys=named), "solo")
    r0 = plan.ranks[0]
    c = gateway_container(r0)
    files = render_files(c.secrets, None)
    op, alice = bearer_sha256("sk-canary-123"), bearer_sha256("sk-alice-77")
    assert files[gw.KEYS_PATH] == f"{op}\n{alice}\n".encode()
    assert files[gw.NAMES_PATH] == f"{op} sparkctl\n{alice} alice\n".encode()
    # the one raw key the gateway holds: the engine's own, which it sends in a client's place
    assert files[gw.UPSTREAM_PATH] == b"engine Bearer sk-canary-123\n"
    assert "sk-alice-77" not in b"".join(files.values()).decode()
    assert "sk-alice-77" not in c.files[gw.CONFIG_PATH] and "sk-canary-123" not in c.files[gw.CONFIG_PATH]
    # the engine knows only its own key: a named key changes nothing of the rank
    bare = build_plan(_profile(api_key={"env": "SPARKCTL_API_KEY"}), "solo").ranks[0]
    assert bare.labels["sparkctl.config_hash"] == r0.labels["sparkctl.config_hash"]
    # revoking alice (a profile change + `up`) replaces the gateway alone
    assert gateway_container(bare).labels["sparkctl.config_hash"] != c.labels["sparkctl.config_hash"]
    assert plan.to_json()["ranks"][0]["gateway"]["named"] == [
        {"name": "alice", "key": "*** (from $ALICE_KEY)", "per_minute": 30}
    ]


SHIPPED = [
    (p, m)
    for p in sorted((ROOT / "profiles").glob("*.yaml"))
    if not yaml.safe_load(p.read_text()).get("models")
    for m in yaml.safe_load(p.read_text())["modes"]
]


@pytest.mark.parametrize(("path", "mode"), SHIPPED, ids=[f"{p.stem}-{m}" for p, m in SHIPPED])
def test_named_keys_on_every_shipped_profile_and_mode(path: Path, mode: str, monkeypatch) -> None:
    """engine.api_keys added to each shipped profile: every API gateway of the mode (each replica
    head's, the router's) checks and counts the key, the engine's own argv and hash do not change,
    and preflight asks for its variable."""
    from sparkctl.preflight.checks.security import secret_envs

    monkeypatch.setenv("ALICE_KEY", "sk-alice")
    doc = yaml.safe_load(path.read_text())
    doc["engine"].setdefault("api_key", {"env": "SPARKCTL_API_KEY"})
    bare = build_plan(load_profile_text(yaml.safe_dump(doc), "p.yaml"), mode)
    doc["engine"]["api_keys"] = {"alice": {"env": "ALICE_KEY", "per_minute": 60}}
    plan = build_plan(load_profile_text(yaml.safe_dump(doc), "p.yaml"), mode)
    gates = plan_gateways(plan)
    heads = [plan.ranks[g.ranks[0]] for g in plan.groups]
    assert len(gates) == len(heads) + (plan.router is not None)
    assert all([(k.name, k.per_minute) for k in g.named] == [("alice", 60)] for g in gates)
    assert [r.argv for r in plan.ranks] == [r.argv for r in bare.ranks]
    assert plan.config_hash == bare.config_hash
    assert secret_envs(plan)["ALICE_KEY"] == "api-key-alice"
    files = render_files(gateway_container(heads[0]).secrets, None)
    assert files[gw.NAMES_PATH].decode().splitlines()[1].endswith(" alice")
