"""`export k8s`: every shipped profile and mode validates offline against the vendored schemas,
and every rank's command and env, as its pod would run them, equal `sparkctl plan --json`
once the LWS variables are substituted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from k8s_schemas import errors, k8s_expand

from sparkctl.errors import UsageError
from sparkctl.export.k8s import export_k8s
from sparkctl.export.k8s_rank import NODE_ENV, NODE_ENV_DIR, WRAPPER_NAME
from sparkctl.profile import load_profile_file, load_profile_text

ROOT = Path(__file__).resolve().parents[3]
PROFILES = sorted((ROOT / "profiles").glob("*.yaml"))
# sparkctl runs on spark1 as the profiles' user (`address: local` takes this machine's home)
HOME = "/home/spark"
SHARED_NODE_MODES = {("two-gpu-box.yaml", "dp2")}  # refused: see test_replicas_sharing_a_node_are_refused
# A fleet renders each service as one of these: test_k8s_fleet.py.
SINGLE = [p for p in PROFILES if not load_profile_file(p).models]
CASES = [(p, m) for p in SINGLE for m in load_profile_file(p).modes if (p.name, m) not in SHARED_NODE_MODES]
PRINT = "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'env': dict(os.environ)}))"
SHELL_ENV = {"PATH", "PWD", "SHLVL", "_", "OLDPWD", "LC_CTYPE"}  # sh and Python add these


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", HOME)


def plan_json(profile: Path, mode: str) -> dict:
    env = {**os.environ, "HOME": HOME, "PYTHONPATH": str(ROOT / "src")}
    res = subprocess.run(
        [sys.executable, "-m", "sparkctl", "-p", str(profile), "plan", mode, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def run_pod(container: dict, lws_env: dict[str, str], node: str, node_files: dict[str, str], tmp: Path):
    """The process the pod starts: Kubernetes expands env and command, the wrapper (if any) sources
    the node's env file; a printer stands in for the engine and reports its argv and env."""
    env: dict[str, str] = dict(lws_env)
    for item in container.get("env", []):
        if "valueFrom" in item:
            assert item["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
            env[item["name"]] = node
        else:
            env[item["name"]] = k8s_expand(item["value"], env)
    command = [k8s_expand(w, env) for w in container["command"]]
    if command[:2] == ["/bin/sh", "-c"]:
        assert command[3] == WRAPPER_NAME
        for name, text in node_files.items():
            (tmp / name).write_text(text)
        script = command[2].replace(NODE_ENV_DIR, str(tmp))
        command = ["/bin/sh", "-c", script, WRAPPER_NAME, sys.executable, "-c", PRINT, *command[4:]]
    else:
        command = [sys.executable, "-c", PRINT, *command]
    res = subprocess.run(
        command, capture_output=True, text=True, env={**env, "PATH": "/usr/bin:/bin"}, timeout=30
    )
    assert res.returncode == 0, res.stderr
    seen = json.loads(res.stdout)
    seen["env"] = {k: v for k, v in seen["env"].items() if k not in {*SHELL_ENV, *lws_env, NODE_ENV}}
    return seen


def templates(lws: dict) -> tuple[dict, dict]:
    lwt = lws["spec"]["leaderWorkerTemplate"]
    worker = lwt["workerTemplate"]["spec"]["containers"][0]
    leader = lwt.get("leaderTemplate", lwt["workerTemplate"])["spec"]["containers"][0]
    return leader, worker


@pytest.mark.parametrize(("profile", "mode"), CASES, ids=[f"{p.stem}-{m}" for p, m in CASES])
def test_export_validates_against_the_vendored_schemas(profile: Path, mode: str) -> None:
    out = export_k8s(load_profile_file(profile), mode, "llm")
    for name, docs in out.objects.items():
        assert [d for d in yaml.safe_load_all(out.files[name]) if d] == docs  # the text is the objects
        for doc in docs:
            assert errors(doc) == []


def test_the_validation_can_fail() -> None:
    out = export_k8s(load_profile_file(ROOT / "profiles/quad-spark.yaml"), "tp2x2", "llm")
    lws = out.objects["tp2x2.yaml"][1]
    bad = json.loads(json.dumps(lws))
    bad["spec"]["startupPolicy"] = "WhenReady"
    bad["spec"]["leaderWorkerTemplate"]["sizee"] = 2
    bad["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["securityContext"][
        "privileged"
    ] = "no"
    found = "\n".join(errors(bad))
    assert "startupPolicy: 'WhenReady' is not one of" in found
    assert "'sizee' was unexpected" in found
    assert "privileged: 'no' is not of type" in found
    router = next(d for d in out.objects["tp2x2-router.yaml"] if d["kind"] == "Deployment")
    router["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = 1
    assert errors(router)


@pytest.mark.parametrize(("profile", "mode"), CASES, ids=[f"{p.stem}-{m}" for p, m in CASES])
def test_each_rank_runs_the_plans_command_and_env(profile: Path, mode: str, tmp_path: Path) -> None:
    plan = plan_json(profile, mode)
    out = export_k8s(load_profile_file(profile), mode, "llm")
    docs = [d for name, ds in out.objects.items() if not name.endswith("-router.yaml") for d in ds]
    sets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "LeaderWorkerSet"}
    cm = next(
        (d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-nodes")),
        {"data": {}},
    )
    for rank in plan["ranks"]:
        group = plan["groups"][rank["group"]]
        # one LeaderWorkerSet per mode; one per replica when replicas share a node
        lws = sets.get(out.lws_name) or sets[f"{out.lws_name}-g{rank['group']}"]
        assert lws["spec"]["replicas"] == (plan["replicas"] if len(sets) == 1 else 1)
        assert lws["spec"]["leaderWorkerTemplate"]["size"] == plan["nnodes"]
        lws_env = {
            "LWS_LEADER_ADDRESS": (group["dist_init_addr"] or "unused:0").rsplit(":", 1)[0],
            "LWS_GROUP_SIZE": str(plan["nnodes"]),
            "LWS_WORKER_INDEX": str(rank["node_rank"]),
        }
        leader, worker = templates(lws)
        container = leader if rank["node_rank"] == 0 else worker
        seen = run_pod(container, lws_env, rank["node"], cm["data"], tmp_path)
        assert seen["argv"] == rank["argv"], f"rank {rank['rank']}"
        assert seen["env"] == rank["env"], f"rank {rank['rank']}"


def test_the_router_runs_the_plans_router_with_service_discovery() -> None:
    plan = plan_json(ROOT / "profiles/quad-spark.yaml", "tp2x2")
    out = export_k8s(load_profile_file(ROOT / "profiles/quad-spark.yaml"), "tp2x2", "llm")
    deploy = next(d for d in out.objects["tp2x2-router.yaml"] if d["kind"] == "Deployment")
    argv = deploy["spec"]["template"]["spec"]["containers"][0]["command"]
    want = plan["router"]["argv"]  # on the pod's loopback, behind its gateway, as `up` runs it
    cut = want.index("--worker-urls")
    assert argv[:cut] == want[:cut] and argv[argv.index("--host") + 1] == "127.0.0.1"
    side = deploy["spec"]["template"]["spec"]["containers"][1]
    assert (
        side["name"] == "gateway" and side["ports"][0]["containerPort"] == plan["router"]["gateway"]["port"]
    )
    assert argv[cut:] == [
        "--service-discovery",
        "--selector",
        f"leaderworkerset.sigs.k8s.io/name={out.lws_name}",
        "leaderworkerset.sigs.k8s.io/worker-index=0",
        "--service-discovery-port",
        str(plan["groups"][0]["url"].rsplit(":", 1)[1]),
        "--service-discovery-namespace",
        "llm",
    ]
    kinds = [d["kind"] for d in out.objects["tp2x2-router.yaml"]]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding", "Deployment", "Service", "ConfigMap"]
    role = out.objects["tp2x2-router.yaml"][1]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]


def test_lws_policies_and_the_fabric() -> None:
    out = export_k8s(load_profile_file(ROOT / "profiles/quad-spark.yaml"), "tp2x2", "llm")
    text = out.files["tp2x2.yaml"]
    lws = out.objects["tp2x2.yaml"][1]
    spec = lws["spec"]
    assert spec["startupPolicy"] == "LeaderCreated"
    assert spec["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert spec["rolloutStrategy"]["rollingUpdateConfiguration"] == {"maxUnavailable": 1, "maxSurge": 0}
    assert "# LeaderCreated: workers start once the leader pod exists" in text
    assert "# 2 replicas: maxUnavailable 1, maxSurge 0" in text
    pod = spec["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    c = pod["containers"][0]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    # As `up` runs the rank: cap_drop ALL, IPC_LOCK (rdma) and DAC_OVERRIDE (the node user `spark`
    # owns the mounted caches), no privilege escalation.
    assert c["securityContext"] == {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK", "DAC_OVERRIDE"]},
    }
    assert c["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert c["imagePullPolicy"] == "IfNotPresent"
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["dev-dev-infiniband"]["hostPath"] == {"path": "/dev/infiniband", "type": "Directory"}
    assert vols["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Gi"}
    hub = next(
        v
        for v in pod["volumes"]
        if v["hostPath"]["path"]
        if "hostPath" in v and v["hostPath"]["path"].endswith("/hub")
    )
    assert hub["hostPath"] == {"path": f"{HOME}/.cache/huggingface/hub", "type": "Directory"}
    mount = next(m for m in c["volumeMounts"] if m["name"] == hub["name"])
    assert mount == {"name": hub["name"], "mountPath": "/root/.cache/huggingface/hub", "readOnly": True}
    nodes = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert nodes["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["spark2", "spark4"]
    cm = out.objects["tp2x2.yaml"][0]
    assert cm["data"]["spark3.env"] == "SGLANG_HOST_IP=192.168.100.12\n"
    assert {e["name"] for e in c["env"]} >= {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA"}


def test_secrets_are_files_of_one_secret_never_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_tokenvalue123")
    monkeypatch.setenv("SPARKCTL_API_KEY", "sk-apikeyvalue456")
    out = export_k8s(load_profile_file(ROOT / "profiles/quad-spark.yaml"), "tp2x2", "llm")
    text = "".join(out.files.values())
    assert "hf_tokenvalue123" not in text and "sk-apikeyvalue456" not in text
    leader = out.objects["tp2x2.yaml"][1]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    secret = next(v for v in leader["volumes"] if "secret" in v)["secret"]
    assert secret["secretName"] == out.secret_name
    assert [i["key"] for i in secret["items"]] == ["HF_TOKEN", "sparkctl-sglang.yaml"]
    assert "/run/secrets/sparkctl-sglang.yaml" in leader["containers"][0]["command"]  # SGLang --config


def test_a_template_refuses_per_node_paths() -> None:
    """spark1 keeps its HF cache under /data, spark2 under /home/spark: one template cannot."""
    from sparkctl.profile.schema import Profile

    data = load_profile_file(ROOT / "profiles/quad-spark.yaml").model_dump(mode="json", exclude_none=True)
    data["nodes"][0]["hf_cache"] = "/data/huggingface"
    data.pop("gateway")  # its defaults, dumped: a single model refuses a fleet's gateway: section
    with pytest.raises(UsageError, match="a pod template takes one hostPath") as exc:
        export_k8s(Profile.model_validate(data), "tp2x2", "llm")
    assert "same path" in (exc.value.fix or "")


def test_the_export_does_not_depend_on_the_runners_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """The profile says `user: spark`: rank 0's `~` is spark's home, whoever runs the export."""
    monkeypatch.setenv("HOME", "/root")
    out = export_k8s(load_profile_file(ROOT / "profiles/quad-spark.yaml"), "tp2x2", "llm")
    [lws] = [o for o in out.objects["tp2x2.yaml"] if o["kind"] == "LeaderWorkerSet"]
    volumes = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["volumes"]
    paths = [v["hostPath"]["path"] for v in volumes if "hostPath" in v]
    assert "/home/spark/.cache/huggingface/hub" in paths and "/home/spark/.triton" in paths, paths


def test_replicas_sharing_a_node_get_a_leaderworkerset_each_and_the_plans_router() -> None:
    plan = plan_json(ROOT / "profiles/two-gpu-box.yaml", "dp2")
    out = export_k8s(load_profile_file(ROOT / "profiles/two-gpu-box.yaml"), "dp2", "llm")
    assert list(out.files) == ["dp2-g0.yaml", "dp2-g1.yaml", "dp2-router.yaml"]
    ports = []
    for g in (0, 1):
        lws = out.objects[f"dp2-g{g}.yaml"][0]
        assert lws["metadata"]["name"] == f"{out.lws_name}-g{g}" and lws["spec"]["replicas"] == 1
        pod = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
        assert "podAntiAffinity" not in pod["affinity"]  # both on box
        engine, side = pod["containers"]  # the API port is the gateway's, beside the engine
        assert "ports" not in engine and side["name"] == "gateway"
        ports.append(side["ports"][0]["containerPort"])
    assert ports == [30001, 30002]
    deploy, config = out.objects["dp2-router.yaml"]  # loopback-bound: no Service, no discovery, no RBAC
    pod = deploy["spec"]["template"]["spec"]
    assert pod["containers"][0]["command"] == plan["router"]["argv"]
    assert pod["hostNetwork"] is True and deploy["spec"]["strategy"] == {"type": "Recreate"}
    assert pod["containers"][0]["readinessProbe"]["httpGet"]["host"] == "127.0.0.1"
    assert config["kind"] == "ConfigMap" and "bind 127.0.0.1:30000" in config["data"]["haproxy.cfg"]
    assert [n for n in out.notes if "squatter check is not exported" in n], out.notes


def test_an_unsettled_plan_is_refused() -> None:
    text = (
        (ROOT / "profiles/dual-spark.yaml")
        .read_text()
        .replace("hcas: [rocep1s0f1, roceP2p1s0f1]", "hcas: auto")
    )
    with pytest.raises(UsageError, match="fabric.hcas is 'auto'"):
        export_k8s(load_profile_text(text), "tp2", "llm")


def test_ranks_that_bind_per_node_addresses_are_refused() -> None:
    text = (ROOT / "profiles/quad-spark.yaml").read_text().replace("  host: 0.0.0.0 ", "  # host unset ")
    # tp4 with host unset: the ranks bind each node's own IP (read on the node by `up`), which
    # one template cannot hold; a name would not do either (the container may not resolve it)
    with pytest.raises(UsageError, match="the plan is not settled: spark2: --host is the IP spark2.local"):
        export_k8s(load_profile_text(text), "tp4", "llm")
    by_ip = text.replace("address: spark3.local", "address: 192.168.1.13").replace(
        "address: spark2.local", "address: 192.168.1.12"
    )
    by_ip = by_ip.replace("address: spark4.local", "address: 192.168.1.14")
    with pytest.raises(UsageError, match="rank 2 on node spark3 runs `192.168.1.13` where another runs"):
        export_k8s(load_profile_text(by_ip), "tp4", "llm")


def test_leaders_and_workers_stay_on_the_plans_nodes(tmp_path: Path) -> None:
    text = (ROOT / "profiles/dual-spark.yaml").read_text().replace("  host: 0.0.0.0 ", "  # host unset ")
    text = text.replace("address: spark2.local", "address: 192.168.1.12")  # bound by IP, never by name
    out = export_k8s(load_profile_text(text), "tp2", "llm")
    lwt = out.objects["tp2.yaml"][1]["spec"]["leaderWorkerTemplate"]

    def nodes(tpl: str) -> list[str]:
        aff = lwt[tpl]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        return aff["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]

    # rank 1 binds spark2's IP: its template may only run on spark2
    assert (nodes("leaderTemplate"), nodes("workerTemplate")) == (["spark1"], ["spark2"])
    assert "192.168.1.12" in lwt["workerTemplate"]["spec"]["containers"][0]["command"]


def test_single_node_modes_run_the_argv_unwrapped() -> None:
    out = export_k8s(load_profile_file(ROOT / "profiles/solo-spark.yaml"), "solo", "llm")
    docs = out.objects["solo.yaml"]
    assert [d["kind"] for d in docs] == ["LeaderWorkerSet", "Service", "ConfigMap"]  # its gateway's config
    lws = docs[0]
    c = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert c["command"][:3] == ["python3", "-m", "sglang.launch_server"]
    # `command` replaces the image's ENTRYPOINT and, without `args`, its CMD too: as `up` runs it
    assert "args" not in c
    # bound to loopback as in the plan: the kubelet probes it there (host network)
    assert c["readinessProbe"]["httpGet"] == {"host": "127.0.0.1", "path": "/health", "port": 8888}
    assert c["startupProbe"]["httpGet"]["path"] == "/v1/models"  # no API key: the plan's first probe
    assert "leaderTemplate" not in lws["spec"]["leaderWorkerTemplate"]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": HOME, "PYTHONPATH": str(ROOT / "src")}
    argv = [
        sys.executable,
        "-m",
        "sparkctl",
        "-p",
        str(ROOT / "profiles/quad-spark.yaml"),
        "export",
        "k8s",
        *args,
    ]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def test_cli_dry_run_writes_nothing_and_json_lists_the_files(tmp_path: Path) -> None:
    res = _cli("dp4", "--dry-run", "-o", "out", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "kind: LeaderWorkerSet" in res.stdout and "kind: Deployment" in res.stdout
    assert not (tmp_path / "out").exists()
    res = _cli("dp4", "-o", "out", "--namespace", "llm", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["written"] == [str(Path("out") / "dp4.yaml"), str(Path("out") / "dp4-router.yaml")]
    assert [f["objects"][0] for f in data["files"]] == [
        "LeaderWorkerSet/sparkctl-sparkquad-dp4",
        "ServiceAccount/sparkctl-sparkquad-router",
    ]
    assert (tmp_path / "out" / "dp4.yaml").read_text().count("namespace: llm") >= 1


def test_cli_secrets_go_to_a_pipe_only(tmp_path: Path) -> None:
    env_keys = {"HF_TOKEN": "hf_pipetoken", "SPARKCTL_API_KEY": 'key"with\\quote'}
    os.environ.update(env_keys)
    try:
        res = _cli("tp2x2", "--secrets", cwd=tmp_path)
    finally:
        for k in env_keys:
            os.environ.pop(k)
    assert res.returncode == 0, res.stderr
    secret = yaml.safe_load(res.stdout)
    assert errors(secret) == []
    import base64

    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data["HF_TOKEN"] == "hf_pipetoken"
    assert yaml.safe_load(data["sparkctl-sglang.yaml"]) == {"api-key": 'key"with\\quote'}
    assert data["sparkctl-router-key"] == 'key"with\\quote'


def test_rdma_from_a_device_plugin_replaces_the_hostpath() -> None:
    out = export_k8s(load_profile_file(ROOT / "profiles/dual-spark.yaml"), "tp2", "llm", "rdma/hca_shared")
    pod = out.objects["tp2.yaml"][1]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    c = pod["containers"][0]
    assert c["resources"] == {"limits": {"nvidia.com/gpu": 1, "rdma/hca_shared": 1}}
    assert not any(v.get("hostPath", {}).get("path") == "/dev/infiniband" for v in pod["volumes"])
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK", "DAC_OVERRIDE"]}


def test_with_an_api_key_the_startup_probe_needs_no_key() -> None:
    out = export_k8s(load_profile_file(ROOT / "profiles/dual-spark.yaml"), "solo", "llm")
    c = out.objects["solo.yaml"][0]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert c["startupProbe"]["tcpSocket"] == {"port": 8888}  # /v1/models would want the key
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8888}


def test_cli_secrets_are_refused_on_a_terminal(tmp_path: Path) -> None:
    import pty

    primary, secondary = pty.openpty()
    env = {
        **os.environ,
        "HOME": HOME,
        "PYTHONPATH": str(ROOT / "src"),
        "HF_TOKEN": "hf_tty",
        "SPARKCTL_API_KEY": "k",
    }
    argv = [sys.executable, "-m", "sparkctl", "-p", str(ROOT / "profiles/quad-spark.yaml"), "export", "k8s"]
    try:
        res = subprocess.run(
            [*argv, "tp2x2", "--secrets"],
            stdout=secondary,
            stderr=subprocess.PIPE,
            env=env,
            timeout=120,
            text=True,
        )
    finally:
        os.close(secondary)
    try:
        shown = os.read(primary, 65536).decode(errors="replace")
    except OSError:  # EIO: nothing was written to the terminal
        shown = ""
    os.close(primary)
    assert res.returncode == 2
    assert "refused on a terminal" in res.stderr
    assert "hf_tty" not in shown + res.stderr


def test_nics_that_differ_by_node_go_in_the_nodes_env_file(tmp_path: Path) -> None:
    text = (ROOT / "profiles/dual-spark.yaml").read_text()
    head, tail = text.split("  - name: spark2", 1)
    tail = tail.replace("netdevs: [enp1s0f1np1]", "netdevs: [enP2p1s0f1np1]", 1)
    tail = tail.replace("hcas: [rocep1s0f1, roceP2p1s0f1]", "hcas: [roceP2p1s0f1]", 1)
    profile = tmp_path / "p.yaml"
    profile.write_text(head + "  - name: spark2" + tail)
    out = export_k8s(load_profile_file(profile), "tp2", "llm")
    cm, lws = out.objects["tp2.yaml"][:2]
    assert cm["data"]["spark2.env"] == (
        "NCCL_SOCKET_IFNAME=enP2p1s0f1np1\nGLOO_SOCKET_IFNAME=enP2p1s0f1np1\n"
        "SGLANG_HOST_IP=192.168.100.11\nNCCL_IB_HCA=roceP2p1s0f1\n"
    )
    plan = plan_json(profile, "tp2")
    leader, worker = templates(lws)
    for rank, container in zip(plan["ranks"], (leader, worker), strict=True):
        lws_env = {"LWS_LEADER_ADDRESS": "192.168.100.10", "LWS_GROUP_SIZE": "2"}
        seen = run_pod(
            container,
            {**lws_env, "LWS_WORKER_INDEX": str(rank["node_rank"])},
            rank["node"],
            cm["data"],
            tmp_path,
        )
        assert (seen["argv"], seen["env"]) == (rank["argv"], rank["env"])


def test_a_gated_start_is_exported_ungated_and_says_so() -> None:
    """Nothing in the cluster opens the engine's launch gate: a gated pod would wait forever."""
    data = yaml.safe_load((ROOT / "profiles/dual-spark.yaml").read_text())
    data.setdefault("memory", {})["gated_start"] = True
    out = export_k8s(load_profile_text(yaml.safe_dump(data)), "tp2", "llm")
    text = json.dumps(out.objects)
    assert "--gated-launch-port" not in text
    assert any(n.startswith("memory.gated_start is not exported") for n in out.notes)
