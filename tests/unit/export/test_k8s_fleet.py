"""`export k8s` of a fleet: each service rendered as its single-model export renders it (its own
LeaderWorkerSet, gateway sidecar, Service, ConfigMaps, Secret), every name, label and selector
carrying the service, all validating offline against the vendored schemas."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from k8s_schemas import errors

from sparkctl.errors import UsageError
from sparkctl.export.k8s import export_k8s
from sparkctl.export.k8s_fleet import export_fleet, merge
from sparkctl.export.k8s_fleet_gateway import FILE as GATEWAY_FILE
from sparkctl.planning.fleet import FleetError, service_plan
from sparkctl.profile import load_profile_file, load_profile_text

ROOT = Path(__file__).resolve().parents[3]
FLEETS = sorted(p for p in (ROOT / "profiles").glob("*.yaml") if load_profile_file(p).models)
SELECTIONS = [(p, None) for p in FLEETS] + [
    (ROOT / "profiles/fleet-two-sparks.yaml", "chat:solo"),
    (ROOT / "profiles/fleet-two-sparks.yaml", "chat:tp2,coder:solo"),
]
HOME = "/home/spark"


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", HOME)


def by_kind(objects: dict[str, list[dict]], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for docs in objects.values() for d in docs if d["kind"] == kind}


def service_of(doc: dict) -> str:
    return doc["metadata"]["labels"]["sparkctl.service"]


def test_the_shipped_fleets_are_the_ones_tested() -> None:
    assert [p.name for p in FLEETS] == ["fleet-two-gpu-box.yaml", "fleet-two-sparks.yaml"]


@pytest.mark.parametrize(("profile", "selection"), SELECTIONS, ids=[f"{p.stem}-{s}" for p, s in SELECTIONS])
def test_a_fleet_renders_a_leaderworkerset_per_service_that_validates(
    profile: Path, selection: str | None
) -> None:
    prof = load_profile_file(profile)
    out = export_fleet(prof, selection, "llm")
    for name, docs in out.objects.items():
        assert [d for d in yaml.safe_load_all(out.files[name]) if d] == docs  # the text is the objects
        for doc in docs:
            assert errors(doc) == [], (name, doc["kind"])
            assert doc["metadata"]["namespace"] == "llm"
            assert name == GATEWAY_FILE or service_of(doc) in prof.models
    sets = by_kind(out.objects, "LeaderWorkerSet")
    assert sorted(service_of(d) for d in sets.values()) == sorted(prof.models)
    for lws in sets.values():  # each runs its own gateway, as a single-model export renders it
        lwt = lws["spec"]["leaderWorkerTemplate"]
        leader = lwt.get("leaderTemplate", lwt["workerTemplate"])["spec"]["containers"]
        assert [c["name"] for c in leader] == ["engine", "gateway"]
    assert any(n.startswith("the fleet's single endpoint is rendered: gateway.yaml") for n in out.notes)


@pytest.mark.parametrize(("profile", "selection"), SELECTIONS, ids=[f"{p.stem}-{s}" for p, s in SELECTIONS])
def test_no_name_is_shared_by_two_services(profile: Path, selection: str | None) -> None:
    out = export_fleet(load_profile_file(profile), selection, "llm")
    gateway = {(d["kind"], d["metadata"]["name"]) for d in out.objects.pop(GATEWAY_FILE)}
    names = [(d["kind"], d["metadata"]["name"]) for docs in out.objects.values() for d in docs]
    assert not gateway & set(names)
    assert len(names) == len(set(names)), names
    for kind, name in names:
        svc = next(
            s.service
            for s in out.services
            if any(d["metadata"]["name"] == name for d in sum(s.objects.values(), []))
        )
        assert f"-{svc}-" in name, (kind, name)
    secrets = [s.secret_name for s in out.services if s.secret_name]
    assert len(set(secrets)) == len(secrets)
    sets = by_kind(out.objects, "LeaderWorkerSet")
    for svc in by_kind(out.objects, "Service").values():  # a Service selects its own service's leaders
        lws = sets[svc["spec"]["selector"]["leaderworkerset.sigs.k8s.io/name"]]
        assert service_of(lws) == service_of(svc)
    for lws in sets.values():  # the pods mount their own service's Secret and ConfigMaps
        text = json.dumps(lws)
        own = next(s for s in out.services if s.service == service_of(lws))
        others = [s for s in out.services if s is not own]
        assert own.secret_name is None or f'"secretName": "{own.secret_name}"' in text
        assert all(
            o.lws_name not in text and (o.secret_name is None or o.secret_name not in text) for o in others
        )
        spread = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["affinity"]
        if "podAntiAffinity" in spread:  # one pod per node of this service, never of the others
            term = spread["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
            assert term["labelSelector"]["matchLabels"]["sparkctl.service"] == service_of(lws)


def test_each_leaderworkerset_runs_its_services_image_and_args() -> None:
    prof = load_profile_file(ROOT / "profiles/fleet-two-sparks.yaml")
    out = export_fleet(prof, None, "llm")
    sets = {service_of(d): d for d in by_kind(out.objects, "LeaderWorkerSet").values()}
    modes = {s.service: s.plan.mode for s in out.services}
    assert modes == {"chat": "tp2", "coder": "solo"}
    for name, lws in sets.items():
        plan = service_plan(prof, name, modes[name]).plan
        engine = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
        assert engine["image"] == prof.models[name].image.ref == plan.ranks[-1].image
    solo = sets["coder"]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert solo["command"] == service_plan(prof, "coder", "solo").plan.ranks[0].argv  # one node: unwrapped
    coder, chat = json.dumps(sets["coder"]), json.dumps(sets["chat"])
    assert "--gpu-memory-utilization" in coder and "--gpu-memory-utilization" not in chat
    assert "--mem-fraction-static" in chat and "--mem-fraction-static" not in coder
    assert "nvcr.io/nvidia/vllm:25.11-py3" in coder and "nvcr.io/nvidia/vllm" not in chat
    assert "qwen2.5-coder-7b" in coder and "qwen2.5-coder-7b" not in chat


def test_a_service_renders_as_its_single_model_profile_with_its_name_added(tmp_path: Path) -> None:
    """A fleet of one service, the single-model dual-spark.yaml's model: the same objects, each
    name and label carrying the service (the single-model rendering, reused)."""
    data = yaml.safe_load((ROOT / "profiles/dual-spark.yaml").read_text())
    data["engine"]["args"]["mem-fraction-static"] = 0.6  # a fleet's budget must fit a node
    single = load_profile_text(yaml.safe_dump(data))
    data["models"] = {"big": {k: data.pop(k) for k in ("image", "model", "engine", "modes")}}
    fleet = load_profile_text(yaml.safe_dump(data))
    for mode in ("solo", "tp2", "dp2"):
        alone, one = export_k8s(single, mode, "llm"), export_fleet(fleet, f"big:{mode}", "llm")
        text = json.dumps(alone.objects).replace("sparkctl-sparkduo-", "sparkctl-sparkduo-big-")
        text = text.replace(
            '"sparkctl.cluster": "sparkduo"', '"sparkctl.cluster": "sparkduo", "sparkctl.service": "big"'
        )
        del one.objects[GATEWAY_FILE]  # the fleet's endpoint, beside the service's own objects
        assert json.loads(text) == {k.removeprefix("big-"): v for k, v in one.objects.items()}, mode
        assert one.notes[: len(alone.notes)] == alone.notes


def test_a_single_model_export_carries_no_service() -> None:
    out = export_k8s(load_profile_file(ROOT / "profiles/quad-spark.yaml"), "dp4", "llm")
    assert list(out.files) == ["dp4.yaml", "dp4-router.yaml"]
    assert out.files["dp4.yaml"].startswith("# sparkctl export k8s dp4: cluster sparkquad")
    assert "sparkctl.service" not in json.dumps(out.objects)
    assert {d["metadata"]["name"] for docs in out.objects.values() for d in docs} >= {
        "sparkctl-sparkquad-dp4",
        "sparkctl-sparkquad-router",
    }


def test_two_services_objects_of_one_name_are_refused() -> None:
    prof = load_profile_file(ROOT / "profiles/fleet-two-gpu-box.yaml")
    one = export_k8s(prof, "solo", "llm", service="chat")
    with pytest.raises(
        UsageError, match="LeaderWorkerSet sparkctl-fleetbox-chat-solo of service chat is also"
    ):
        merge("llm", [one, one])


def test_a_note_of_some_services_names_them() -> None:
    out = export_fleet(load_profile_file(ROOT / "profiles/fleet-two-sparks.yaml"), None, "llm")
    assert any(n.startswith("the gateway's squatter check is not exported") for n in out.notes)  # both
    assert any(n.startswith("coder: engine.container.user: node is not exported") for n in out.notes)


def test_a_fleet_over_a_node_is_refused_as_plan_refuses_it() -> None:
    data = yaml.safe_load((ROOT / "profiles/fleet-two-sparks.yaml").read_text())
    data["models"]["coder"]["engine"]["args"]["gpu-memory-utilization"] = 0.9
    with pytest.raises(FleetError, match="does not fit"):
        export_fleet(load_profile_text(yaml.safe_dump(data)), None, "llm")


def test_a_service_with_replicas_gets_its_own_router() -> None:
    data = yaml.safe_load((ROOT / "profiles/fleet-two-sparks.yaml").read_text())
    data["models"]["coder"]["engine"]["args"]["gpu-memory-utilization"] = 0.15
    data["models"]["coder"]["modes"]["dp2"] = {"nodes": ["spark1", "spark2"], "replicas": 2}
    out = export_fleet(load_profile_text(yaml.safe_dump(data)), "coder:dp2", "llm")
    assert "coder-dp2-router.yaml" in out.files
    router = by_kind(out.objects, "Deployment")["sparkctl-fleetduo-coder-router"]
    assert errors(router) == [] and service_of(router) == "coder"
    assert router["spec"]["template"]["spec"]["serviceAccountName"] == "sparkctl-fleetduo-coder-router"
    argv = router["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "leaderworkerset.sigs.k8s.io/name=sparkctl-fleetduo-coder-dp2" in argv
    assert any("coder at sparkctl-fleetduo-coder-router.llm.svc:" in n for n in out.notes)


def _cli(
    profile: str, *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": HOME, "PYTHONPATH": str(ROOT / "src"), **(env or {})}
    argv = [sys.executable, "-m", "sparkctl", "-p", str(ROOT / "profiles" / profile), "export", "k8s", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def test_cli_writes_every_services_files_and_the_fleets_gateway(tmp_path: Path) -> None:
    res = _cli("fleet-two-sparks.yaml", "chat:solo", "-o", "out", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "chat-solo.yaml",
        "coder-solo.yaml",
        "gateway.yaml",
    ]
    said = " ".join(res.stdout.split())
    assert "the fleet's single endpoint is rendered: gateway.yaml, Service sparkctl-fleetduo-gateway" in said
    assert "on_demand and idle_stop are not carried" in said and "KEDA" in said
    assert "sparkctl export k8s chat:solo,coder:solo --secrets | kubectl apply -f -" in said
    res = _cli("fleet-two-sparks.yaml", "--json", "--dry-run", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["selection"] == "chat:tp2,coder:solo" and data["written"] == []
    assert [f["objects"][0] for f in data["files"]] == [
        "ConfigMap/sparkctl-fleetduo-chat-tp2-nodes",
        "LeaderWorkerSet/sparkctl-fleetduo-coder-solo",
        "Deployment/sparkctl-fleetduo-gateway",
    ]
    res = _cli("fleet-two-sparks.yaml", "nochat:solo", cwd=tmp_path)
    assert res.returncode == 2 and "unknown service 'nochat'" in res.stderr


def test_cli_secrets_of_a_fleet_are_a_secret_per_service(tmp_path: Path) -> None:
    keys = {"HF_TOKEN": "hf_fleet", "SPARKCTL_API_KEY": "sk-fleet"}
    res = _cli("fleet-two-sparks.yaml", "--secrets", cwd=tmp_path, env=keys)
    assert res.returncode == 0, res.stderr
    secrets = {d["metadata"]["name"]: d for d in yaml.safe_load_all(res.stdout) if d}
    assert sorted(secrets) == ["sparkctl-fleetduo-chat-secrets", "sparkctl-fleetduo-coder-secrets"]
    for name, doc in secrets.items():
        assert errors(doc) == [] and f"-{service_of(doc)}-" in name
    data = {n: {k: base64.b64decode(v).decode() for k, v in d["data"].items()} for n, d in secrets.items()}
    assert data["sparkctl-fleetduo-chat-secrets"]["HF_TOKEN"] == "hf_fleet"
    assert "sk-fleet" in data["sparkctl-fleetduo-coder-secrets"]["sparkctl-vllm.yaml"]
    assert "HF_TOKEN" not in data["sparkctl-fleetduo-coder-secrets"]
