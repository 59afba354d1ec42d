"""`export k8s` of a fleet renders the fleet's one endpoint: the planning's own HAProxy config
routing each served name to that service's in-cluster Service, a Deployment with the sidecar's
least privilege, the key hashes from the services' Secrets (never a key), no route waiting."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from k8s_schemas import errors

from sparkctl.errors import UsageError
from sparkctl.export.k8s import export_k8s
from sparkctl.export.k8s_fleet import export_fleet
from sparkctl.export.k8s_fleet_gateway import FILE, HASHES_IN
from sparkctl.export.k8s_gateway import KEYS_KEY
from sparkctl.export.k8s_secret import secret_values
from sparkctl.planning.fleet_gateway import LUA_PATH, MODELS_MAP_PATH, OPERATORS_PATH
from sparkctl.planning.gateway import CONFIG_PATH, KEYS_PATH
from sparkctl.profile import load_profile_file, load_profile_text
from sparkctl.secrets import bearer_sha256

ROOT = Path(__file__).resolve().parents[3]
FLEETS = sorted(p for p in (ROOT / "profiles").glob("*.yaml") if load_profile_file(p).models)
KEY = "sk-canary-fleet-7731"
TOKEN = "hf_canary-fleet-7731"


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/spark")
    monkeypatch.setenv("SPARKCTL_API_KEY", KEY)
    monkeypatch.setenv("HF_TOKEN", TOKEN)


def gateway(out) -> dict[str, dict]:
    return {d["kind"]: d for d in out.objects[FILE]}


def pod(out) -> dict:
    return gateway(out)["Deployment"]["spec"]["template"]["spec"]


def data(out) -> dict[str, str]:
    return gateway(out)["ConfigMap"]["data"]


def servers(config: str) -> dict[str, list[str]]:
    """backend svc_<service> -> its server addresses, read from the rendered haproxy.cfg."""
    out: dict[str, list[str]] = {}
    backend = None
    for line in config.splitlines():
        if line.startswith("backend svc_") and "%" not in line:
            backend = line.split("svc_", 1)[1]
            out[backend] = []
        elif backend and line.strip().startswith("server "):
            out[backend].append(line.split()[2])
    return out


def _sparks(change=None):
    raw = yaml.safe_load((ROOT / "profiles/fleet-two-sparks.yaml").read_text())
    if change:
        change(raw)
    return load_profile_text(yaml.safe_dump(raw))


def test_the_shipped_fleets_are_the_ones_tested() -> None:
    assert [p.name for p in FLEETS] == ["fleet-two-gpu-box.yaml", "fleet-two-sparks.yaml"]


@pytest.mark.parametrize("profile", FLEETS, ids=[p.stem for p in FLEETS])
def test_both_fleets_render_the_gateway_and_it_validates(profile: Path) -> None:
    prof = load_profile_file(profile)
    out = export_fleet(prof, None, "llm")
    name = f"sparkctl-{prof.cluster}-gateway"
    objs = gateway(out)
    assert [d["kind"] for d in out.objects[FILE]] == ["Deployment", "Service", "ConfigMap"]
    assert [d for d in yaml.safe_load_all(out.files[FILE]) if d] == out.objects[FILE]
    for doc in objs.values():
        assert errors(doc) == [], doc["kind"]
        assert doc["metadata"]["name"] == name and doc["metadata"]["namespace"] == "llm"
    assert objs["Deployment"]["spec"]["replicas"] == 1
    assert objs["Service"]["spec"]["ports"][0]["port"] == prof.gateway.port == 8000
    assert objs["Service"]["spec"]["selector"] == objs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert pod(out)["volumes"][0] == {"name": "config", "configMap": {"name": name}}
    assert sorted(data(out)) == ["fleet.lua", "haproxy.cfg", "models.map", "unknown-model.json"]


def test_another_gateway_port_is_the_services_and_the_listeners() -> None:
    out = export_fleet(_sparks(lambda d: d.update(gateway={"port": 8100})), None, "llm")
    assert gateway(out)["Service"]["spec"]["ports"][0]["port"] == 8100
    assert "    bind 0.0.0.0:8100" in data(out)["haproxy.cfg"].splitlines()


@pytest.mark.parametrize(
    ("profile", "selection"),
    [(FLEETS[0], None), (FLEETS[1], None), (FLEETS[1], "chat:solo")],
    ids=["box", "sparks", "sparks-chat-solo"],
)
def test_each_served_name_goes_to_its_services_service(profile: Path, selection: str | None) -> None:
    out = export_fleet(load_profile_file(profile), selection, "llm")
    config = data(out)["haproxy.cfg"]
    routed = dict(line.split() for line in data(out)["models.map"].splitlines())
    assert len(routed) == len(out.services)
    for one in out.services:
        svc = next(d for docs in one.objects.values() for d in docs if d["kind"] == "Service")
        port = svc["spec"]["ports"][0]["port"]
        assert port == one.plan.endpoint.port
        assert routed[one.plan.endpoint.served_model_name] == one.service
        assert servers(config)[one.service] == [f"{svc['metadata']['name']}.llm.svc:{port}"]


def test_a_service_with_replicas_is_reached_at_its_routers_service() -> None:
    def dp2(d: dict) -> None:
        d["models"]["coder"]["engine"]["args"]["gpu-memory-utilization"] = 0.15
        d["models"]["coder"]["modes"]["dp2"] = {"nodes": ["spark1", "spark2"], "replicas": 2}

    out = export_fleet(_sparks(dp2), "coder:dp2", "llm")
    router = next(d for d in out.objects["coder-dp2-router.yaml"] if d["kind"] == "Service")
    port = router["spec"]["ports"][0]["port"]
    assert router["metadata"]["name"] == "sparkctl-fleetduo-coder-router"
    assert servers(data(out)["haproxy.cfg"])["coder"] == [f"sparkctl-fleetduo-coder-router.llm.svc:{port}"]


def test_no_key_is_in_the_output_and_the_hashes_come_from_the_services_secrets() -> None:
    out = export_fleet(load_profile_file(FLEETS[1]), None, "llm")
    text = "".join(out.files.values()) + json.dumps(out.objects) + json.dumps(out.notes)
    assert KEY not in text and TOKEN not in text
    assert bearer_sha256(KEY) not in text  # the hashes too are the Secrets', not the manifests'
    (init,) = pod(out)["initContainers"]
    assert init["command"][:2] == ["sh", "-c"] and f"{HASHES_IN}/*.sha256" in init["command"][2]
    sources = pod(out)["volumes"][1]["projected"]["sources"]
    assert [s["secret"] for s in sources] == [
        {"name": o.secret_name, "items": [{"key": KEYS_KEY, "path": f"{o.service}.sha256"}]}
        for o in out.services
    ]
    for one in out.services:  # what --secrets prints for the service holds that hash, not the key
        values = secret_values(one.plan, lambda node: pytest.fail(f"no node is read: {node}"))
        assert values[KEYS_KEY] == f"{bearer_sha256(KEY)}\n".encode()
    mounts = {m["mountPath"]: m for m in pod(out)["containers"][0]["volumeMounts"]}
    assert mounts[KEYS_PATH]["subPath"] == mounts[OPERATORS_PATH]["subPath"] == KEYS_KEY
    assert all(m["readOnly"] for m in mounts.values())


def test_a_keyless_fleet_has_no_key_check_and_no_secret() -> None:
    out = export_fleet(load_profile_file(FLEETS[0]), None, "llm")
    assert "initContainers" not in pod(out) and len(pod(out)["volumes"]) == 1
    assert KEYS_PATH not in data(out)["haproxy.cfg"] and "secret" not in json.dumps(out.objects[FILE])


@pytest.mark.parametrize("profile", FLEETS, ids=[p.stem for p in FLEETS])
def test_the_gateway_runs_with_the_sidecars_least_privilege(profile: Path) -> None:
    spec = pod(export_fleet(load_profile_file(profile), None, "llm"))
    assert spec["automountServiceAccountToken"] is False and "hostNetwork" not in spec
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        ctx = c["securityContext"]
        assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] == ctx["runAsGroup"] == 65534
        assert ctx["readOnlyRootFilesystem"] is True and ctx["capabilities"] == {"drop": ["ALL"]}
        assert ctx["privileged"] is False and ctx["allowPrivilegeEscalation"] is False
        assert c["resources"]["limits"]["memory"]
    assert spec["containers"][0]["command"] == ["haproxy", "-db", "-f", CONFIG_PATH]


def test_on_demand_is_not_carried_and_no_route_waits() -> None:
    def on_demand(d: dict) -> None:
        d["models"]["coder"].update(on_demand=True, idle_stop="10m")

    out = export_fleet(_sparks(on_demand), None, "llm")
    lua = data(out)[LUA_PATH.rsplit("/", 1)[1]]
    assert "on_demand = true" not in lua and lua.count("on_demand = false") == 2
    assert "local WAIT_S, POLL_MS" in lua and "WAIT_S, POLL_MS, SERVER = 0," in lua
    note = next(n for n in out.notes if n.startswith("on_demand and idle_stop are not carried"))
    assert "(set for coder)" in note and "KEDA" in note


def test_named_keys_are_said_not_to_pass_the_fleets_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALICE_KEY", "sk-alice-canary-1")

    def named(d: dict) -> None:
        d["models"]["coder"]["engine"]["api_keys"] = {"alice": {"env": "ALICE_KEY"}}

    out = export_fleet(_sparks(named), None, "llm")
    assert any(n.startswith("coder: engine.api_keys do not pass the fleet's gateway") for n in out.notes)
    assert "sk-alice-canary-1" not in "".join(out.files.values())
    plain = export_fleet(load_profile_file(FLEETS[1]), None, "llm")
    assert not any("engine.api_keys" in n for n in plain.notes)


def test_a_key_no_gateway_checks_is_refused() -> None:
    def ungated(d: dict) -> None:
        d["models"]["coder"]["engine"]["gateway"] = False

    with pytest.raises(UsageError, match="service coder: its engine.api_key is checked by no gateway") as exc:
        export_fleet(_sparks(ungated), None, "llm")
    assert "engine.gateway: true" in (exc.value.fix or "")


def test_a_single_model_export_has_no_gateway_deployment() -> None:
    for name, mode in (("dual-spark.yaml", "tp2"), ("quad-spark.yaml", "dp4")):
        out = export_k8s(load_profile_file(ROOT / "profiles" / name), mode, "llm")
        assert FILE not in out.files
        deployments = [
            d["metadata"]["name"] for docs in out.objects.values() for d in docs if d["kind"] == "Deployment"
        ]
        assert all(n.endswith("-router") for n in deployments), deployments


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy (Debian) not installed")
@pytest.mark.parametrize("profile", FLEETS, ids=[p.stem for p in FLEETS])
def test_haproxy_takes_the_rendered_config(profile: Path, tmp_path: Path) -> None:
    out = export_fleet(load_profile_file(profile), None, "llm")
    cfg = data(out)["haproxy.cfg"]
    for key, text in data(out).items():  # the ConfigMap's files, placed under tmp_path
        path = f"{MODELS_MAP_PATH.rsplit('/', 1)[0]}/{key}"
        local = tmp_path / key
        local.write_text(text)
        cfg = cfg.replace(path, str(local))
    hashes = "".join(  # the init container's join of what the Secrets hold
        secret_values(o.plan, lambda node: pytest.fail(node)).get(KEYS_KEY, b"").decode()
        for o in out.services
    )
    for path in (KEYS_PATH, OPERATORS_PATH):
        local = tmp_path / path.rsplit("/", 1)[1]
        local.write_text(hashes)
        cfg = cfg.replace(path, str(local))
    for servers_of in servers(cfg).values():  # the Services' names resolve in the cluster only
        for addr in servers_of:
            cfg = cfg.replace(f" {addr} ", f" 127.0.0.1:{addr.rsplit(':', 1)[1]} ")
    assert "/run/sparkctl" not in cfg and ".svc:" not in cfg
    (tmp_path / "h.cfg").write_text(cfg)
    res = subprocess.run(["haproxy", "-c", "-f", str(tmp_path / "h.cfg")], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
