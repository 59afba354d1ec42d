"""The gateway in the exported pods: the same HAProxy config `up` runs, beside the engine in the
leader pod and beside the router, least privilege, its key a hash from the Secret."""

from __future__ import annotations

from pathlib import Path

import pytest
from k8s_schemas import errors

from sparkctl.export import k8s_gateway as gw
from sparkctl.export.k8s import export_k8s
from sparkctl.planning.gateway import CONFIG_PATH, KEYS_PATH, haproxy_config
from sparkctl.profile import load_profile_file

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/spark")
    monkeypatch.setenv("SPARKCTL_API_KEY", "sk-canary-0451")


def _pods(out) -> list[dict]:
    lws = [d for docs in out.objects.values() for d in docs if d["kind"] == "LeaderWorkerSet"]
    return [t["spec"] for d in lws for t in d["spec"]["leaderWorkerTemplate"].values() if isinstance(t, dict)]


def test_the_leader_pod_runs_the_gateway_beside_the_engine_on_loopback() -> None:
    out = export_k8s(load_profile_file(ROOT / "profiles/dual-spark.yaml"), "tp2", "llm")
    leader = out.objects["tp2.yaml"][1]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    worker = out.objects["tp2.yaml"][1]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    assert [c["name"] for c in leader["containers"]] == ["engine", "gateway"]
    assert [c["name"] for c in worker["containers"]] == ["engine"]  # rank 1 serves no API
    engine, side = leader["containers"]
    cmd = engine["command"]
    gate = out.plan.ranks[0].gateway
    assert gate is not None and cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--port") + 1] == str(gate.upstream_port)
    assert side["ports"] == [{"name": "http", "containerPort": gate.port, "protocol": "TCP"}]
    config = next(
        d for d in out.objects["tp2.yaml"] if d["metadata"]["name"] == gw.configmap_name(out.lws_name)
    )
    assert config["data"][gw.CONFIG_KEY] == haproxy_config(gate)  # what `up` renders, less the owner check
    assert "lua-load" not in config["data"][gw.CONFIG_KEY]
    assert any("squatter check is not exported" in n for n in out.notes)


def test_the_sidecar_is_least_privilege_and_its_key_is_a_hash_from_the_secret() -> None:
    out = export_k8s(load_profile_file(ROOT / "profiles/dual-spark.yaml"), "tp2", "llm")
    gate = out.plan.ranks[0].gateway
    assert gate is not None and gate.keyed
    side, volumes = gw.sidecar("x", gate, out.secret_name)
    ctx = side["securityContext"]
    assert ctx["runAsNonRoot"] and ctx["runAsUser"] != 0 and ctx["readOnlyRootFilesystem"]
    assert ctx["capabilities"] == {"drop": ["ALL"]} and not ctx["allowPrivilegeEscalation"]
    assert side["resources"]["limits"]["memory"]  # bounded
    mounts = {m["mountPath"]: m for m in side["volumeMounts"]}
    assert set(mounts) == {CONFIG_PATH, KEYS_PATH} and all(m["readOnly"] for m in mounts.values())
    [secret] = [v["secret"] for v in volumes if "secret" in v]
    assert secret["secretName"] == out.secret_name and secret["items"] == [
        {"key": "keys.sha256", "path": "keys.sha256"}
    ]
    text = "".join(out.files.values())
    assert "sk-canary-0451" not in text  # no value in any manifest
    unkeyed = gw.sidecar("x", gate.__class__(**{**gate.__dict__, "keyed": False, "key": None}), None)
    assert [m["mountPath"] for m in unkeyed[0]["volumeMounts"]] == [CONFIG_PATH]


def test_the_router_listens_behind_its_own_gateway_in_the_pod_network() -> None:
    out = export_k8s(load_profile_file(ROOT / "profiles/quad-spark.yaml"), "tp2x2", "llm")
    docs = out.objects["tp2x2-router.yaml"]
    deploy = next(d for d in docs if d["kind"] == "Deployment")
    router, side = deploy["spec"]["template"]["spec"]["containers"]
    assert "ports" not in router and side["name"] == "gateway"
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"][gw.CONFIG_KEY]
    assert "bind 0.0.0.0:" in config and "server engine 127.0.0.1:" in config
    assert "/workers" in config  # the worker API sparkctl drives, with the key
    for doc in docs:
        assert errors(doc) == []
    # every replica's leader pod runs its gateway, which answers the router's metadata itself
    leaders = [p for p in _pods(out) if len(p["containers"]) == 2]
    assert leaders and all(p["containers"][1]["name"] == "gateway" for p in leaders)
    assert len(leaders) == len(_pods(out)) // 2  # tp2x2: a leader and a worker template
    lws_config = next(
        d
        for d in out.objects["tp2x2.yaml"]
        if d["kind"] == "ConfigMap" and "gateway" in d["metadata"]["name"]
    )
    assert "/server_info" in lws_config["data"][gw.CONFIG_KEY]


def test_named_keys_reach_the_sidecar_as_up_places_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """engine.api_keys: the config reads the names map and the engine's own header; the sidecar
    mounts both from the Secret, which holds every key's hash (never a client's raw key)."""

    from sparkctl.export.k8s_secret import secret_values
    from sparkctl.planning.gateway import NAMES_PATH, UPSTREAM_PATH
    from sparkctl.profile import load_profile_text

    monkeypatch.setenv("ALICE_KEY", "sk-alice-7781")
    monkeypatch.setenv("HF_TOKEN", "hf-canary")
    text = (ROOT / "profiles/dual-spark.yaml").read_text()
    text = text.replace("engine:\n", "engine:\n  api_keys: {alice: {env: ALICE_KEY}}\n", 1)
    prof = load_profile_text(text)
    out = export_k8s(prof, "tp2", "llm")
    leader = out.objects["tp2.yaml"][1]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    side = leader["containers"][1]
    mounted = {m["mountPath"] for m in side["volumeMounts"]}
    assert {KEYS_PATH, NAMES_PATH, UPSTREAM_PATH} <= mounted
    values = secret_values(out.plan, lambda node: None)  # type: ignore[arg-type,return-value]
    assert len(values["keys.sha256"].splitlines()) == 2  # the operator's and alice's hashes
    assert values["names.map"].decode().split()[1::2] == ["sparkctl", "alice"]
    assert b"sk-alice-7781" not in b"".join(values.values())
    assert values["upstream.map"] == b"engine Bearer sk-canary-0451\n"
    docs = "".join(out.files.values())
    assert "sk-alice-7781" not in docs and "sk-canary-0451" not in docs
