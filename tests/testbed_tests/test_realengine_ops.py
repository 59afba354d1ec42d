"""The real-engine tier, part 2: `bench`, `switch`, a partition under the supervisor, and replicas
behind the real sglang-router through a rolling switch, all on real vLLM (CPU build, tiny random
Qwen3) under sparkctl's own CLI on the lab's two nodes.

vLLM starts in 30-120 s on this shared 2-core host, so starts are shared: one `up solo` serves
`bench`, whose `switch tp2` then serves the partition; one `up dp2` serves the router and the
rolling switch under load. Each test leaves the cluster down (the state fixture checks).
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from sparkctl.clients.router import RouterClient
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file
from tests.testbed.loadgen import LoadGen
from tests.testbed.profiles import ENGINE_IMAGE
from tests.testbed.realengine import SERVED, install_real_engine, write_vllm_profile
from tests.testbed_tests.conftest import cli, cluster_containers, report

pytestmark = [pytest.mark.testbed, pytest.mark.realengine]

SOLO = {"nodes": ["spark1"], "tp": 1, "default": True}
TP2 = {"nodes": ["spark1", "spark2"], "tp": 2}
DP2 = {"nodes": ["spark1", "spark2"], "tp": 1, "replicas": 2}  # one vLLM replica per node
# The lab's supervisor policy: a canary every 2 s, 2 failures in a row restart the group (the
# defaults, 10 s and 3, still detect a partition in ~90 s, against vLLM's own 300 s).
CANARY = ("--canary-every", "2", "--canary-failures", "2")
# Against hangs only: vLLM itself answers a partitioned request after 300 s and then exits.
PARTITION_TIMEOUT = 280.0


@pytest.fixture(scope="module")
def vllm_lab(lab):
    install_real_engine(lab)  # the image is loaded once per lab: a no-op after test_realengine.py
    return lab


@pytest.fixture(scope="module")
def profile_path(vllm_lab, tmp_path_factory) -> Path:
    """Keyless (the lab profile exposes its API on the lab's own addresses); the real sglang-router
    from the stand-in image (the vLLM image does not ship it), fast router health checks."""
    path = tmp_path_factory.mktemp("realengine-ops") / "vllm.yaml"
    modes = {"solo": SOLO, "tp2": TP2, "dp2": DP2, "dp2b": {**DP2, "env": {"ROLL_MARK": "b"}}}
    router = {
        "image": ENGINE_IMAGE,
        "policy": "round_robin",
        "health_check_interval": 1,
        "health_failure_threshold": 2,
        "drain_timeout": 60,
    }
    return write_vllm_profile(vllm_lab, path, modes=modes, router=router)


@pytest.fixture
def state(tmp_path, vllm_lab, profile_path):
    st = tmp_path / "state"
    yield st
    vllm_lab.set_fabric_link("spark2", up=True)
    cli(st, profile_path, "down", timeout=300)
    assert not any(cluster_containers(vllm_lab, load_profile_file(profile_path).cluster).values())


def chat(api_base: str, timeout: float = 120) -> dict:
    body = {"model": SERVED, "messages": [{"role": "user", "content": "hello spark"}], "max_tokens": 8}
    req = urllib.request.Request(
        f"{api_base}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def run_json(state: Path, path: Path, *args: str, timeout: float = 900) -> dict:
    res = cli(state, path, *args, "--json", timeout=timeout)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return json.loads(res.stdout)


def running_modes(lab, path: Path) -> dict[str, set[str]]:
    """{mode: {container status}} of the cluster's engine containers."""
    out: dict[str, set[str]] = {}
    for cs in cluster_containers(lab, load_profile_file(path).cluster).values():
        for c in cs:
            if c.labels.get("sparkctl.role", "engine") == "engine":
                out.setdefault(c.labels["sparkctl.mode"], set()).add(c.status)
    return out


def events(state: Path, path: Path) -> list[dict]:
    res = cli(state, path, "status", "--json", timeout=120)
    assert res.returncode in (0, 1), res.stderr
    return json.loads(res.stdout)["events"]


def test_bench_then_switch_to_tp2_then_a_partition_under_the_supervisor(
    vllm_lab, profile_path, state, request
):
    prof = load_profile_file(profile_path)
    t0 = time.monotonic()
    up = run_json(state, profile_path, "up", "solo")
    assert up["action"] == "started" and up["health"]["ready"], up
    report(request, f"vLLM solo: `up` to ready {time.monotonic() - t0:.0f}s")

    # bench through sparkctl's CLI on the real engine: every request answered with real tokens.
    bench = run_json(
        state, profile_path, "bench", "-w", "code", "--reps", "2", "--max-tokens", "32", timeout=600
    )
    assert bench["mode"] == "solo" and not bench["skipped"], bench
    (code,) = bench["workloads"]
    assert len(code["samples"]) >= 2 and not code["truncated"], code
    assert all(s["completion_tokens"] > 0 for s in code["samples"]), code["samples"]
    tps = code["stats"]["aggregate_tps"]
    assert tps is not None and tps["p50"] > 0, code["stats"]
    report(request, f"vLLM bench solo (code, 2 reps, 32 tokens): {tps['p50']:.0f} tok/s aggregate p50")

    # switch solo -> tp2: the real engine restarted as two ranks across the namespaces; solo gone.
    t0 = time.monotonic()
    sw = run_json(state, profile_path, "switch", "tp2")
    report(request, f"vLLM switch solo -> tp2: {time.monotonic() - t0:.0f}s")
    assert sw["health"]["ready"], sw
    assert running_modes(vllm_lab, profile_path) == {"tp2": {"running"}}
    plan = build_plan(prof, "tp2")
    assert chat(plan.endpoint.api_base)["usage"]["completion_tokens"] > 0
    status = run_json(state, profile_path, "status")
    assert [m["mode"] for m in status["modes"]] == ["tp2"] and status["modes"][0]["health"]["ready"]

    # Partition: spark2's fabric cable pulled while tp2 idles. /health stays 200 and both ranks
    # keep running (no rank watch can see it); vLLM alone would hang the next request for 300 s.
    # The supervisor's fabric heartbeat must see it and restart the group (the canary stays for what
    # only a request sees).
    res = cli(state, profile_path, "supervise", "tp2", "--detach", *CANARY)
    assert res.returncode == 0, res.stderr
    r0, r1 = plan.ranks
    old = {s.rank: vllm_lab.docker(s.node).containers.get(s.container_name).id for s in plan.ranks}
    cut_at = time.time()
    vllm_lab.set_fabric_link(r1.node, up=False)
    assert urllib.request.urlopen(f"{plan.endpoint.url}/health", timeout=30).status == 200
    restarting = None
    while restarting is None and time.time() - cut_at < PARTITION_TIMEOUT:
        time.sleep(2)
        restarting = next((e for e in events(state, profile_path) if e["event"] == "restarting"), None)
    vllm_lab.set_fabric_link(r1.node, up=True)
    evs = events(state, profile_path)
    assert restarting is not None, f"no restart within {PARTITION_TIMEOUT:.0f}s of the partition: {evs}"
    detected = restarting["at"] - cut_at
    failed = [e for e in evs if e["event"] == "canary_failed" and e["at"] >= cut_at]
    partition = next((e for e in evs if e["event"] == "partition" and e["at"] >= cut_at), None)
    report(
        request,
        f"vLLM tp2 partition: detected (group restart) {detected:.1f}s after the cut "
        f"by {partition and partition.get('detected_by')} ({len(failed)} failed canaries before it)",
    )
    # Found by the fabric heartbeat (issue 41), not by the generation canary.
    assert partition is not None and partition.get("detected_by") == "heartbeat", evs
    assert {partition.get("node"), partition.get("peer")} == {r0.node, r1.node}, partition
    assert "fabric partition" in restarting["cause"], restarting
    # The group restarts as a whole: both old rank containers (rank 1 still running when the
    # supervisor acted: vLLM's headless rank never notices) are replaced.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        now = {}
        for s in plan.ranks:
            try:
                now[s.rank] = vllm_lab.docker(s.node).containers.get(s.container_name).id
            except Exception:  # noqa: BLE001 - docker.errors.NotFound: removed, not yet started again
                now[s.rank] = None
        if all(now[r] != old[r] for r in old):
            break
        time.sleep(1)
    assert all(now[r] != old[r] for r in old), (old, now)
    assert r0.node != r1.node


def test_replicas_behind_the_real_router_through_a_rolling_switch_fail_no_request(
    vllm_lab, profile_path, state, request
):
    prof = load_profile_file(profile_path)
    t0 = time.monotonic()
    up = run_json(state, profile_path, "up", "dp2")
    report(request, f"vLLM dp2 (a replica per node + router): `up` to ready {time.monotonic() - t0:.0f}s")
    assert up["action"] == "started" and up["health"]["ready"], up
    old = build_plan(prof, "dp2")
    url = old.endpoint.url
    workers = RouterClient(url).workers()
    assert len(workers) == 2, workers
    # The router spreads requests over both vLLM workers: each replica's own counter moves.
    for _ in range(6):
        assert chat(old.endpoint.api_base)["usage"]["completion_tokens"] > 0
    for group in old.groups:
        with urllib.request.urlopen(f"{group.worker_url}/metrics", timeout=30) as resp:
            text = resp.read().decode()
        done = sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("vllm:request_success_total{")
        )
        assert done >= 1, (group.worker_url, done)

    dry = run_json(state, profile_path, "switch", "dp2b", "--dry-run")
    assert dry["rolling"] == "replicas 0, 1 one at a time", dry["rolling"]
    t0 = time.monotonic()
    with LoadGen(url, model=SERVED, threads=2, stream=True, timeout=120, max_tokens=64, pause=0.5) as load:
        load.wait_for(6, timeout=300)  # requests flowing through the router before the switch
        res = cli(state, profile_path, "switch", "dp2b", "--json", timeout=900)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        load.wait_for(6, timeout=300)  # and still after it
    stats, out = load.stats, json.loads(res.stdout)
    report(
        request,
        f"vLLM rolling switch dp2 -> dp2b behind sglang-router: {stats.line()} "
        f"({stats.total} requests, switch {time.monotonic() - t0:.0f}s with the load)",
    )
    assert stats.failed == 0, stats.line()
    assert stats.ok >= 12
    new = build_plan(prof, "dp2b")
    assert out["action"] == "rolled"
    assert [(r["index"], r["action"], r["new"]) for r in out["rolling"]] == [
        (i, "rolled", {"mode": "dp2b", "config_hash": new.config_hash}) for i in (0, 1)
    ]
    in_flight = sum(r["in_flight"] for r in out["rolling"])
    report(request, f"vLLM rolling switch: {in_flight} requests in flight drained (from vLLM's /metrics)")
    assert running_modes(vllm_lab, profile_path) == {"dp2b": {"running"}}
    assert len(RouterClient(url).workers()) == 2
    assert chat(old.endpoint.api_base)["usage"]["completion_tokens"] > 0
    # sglang-router asks each worker SGLang's /server_info, which vLLM has not: the replica's
    # gateway answers it from the plan, so the router lists the served name (it said "unknown"
    # before the gateway); `up` of the running mode keeps it instead of restarting every replica.
    with urllib.request.urlopen(f"{url}/v1/models", timeout=30) as resp:
        assert [m["id"] for m in json.loads(resp.read())["data"]] == [SERVED]
    assert out["health"]["ready"], out["health"]
    (mode,) = run_json(state, profile_path, "status")["modes"]
    assert mode["mode"] == "dp2b" and mode["health"]["ready"], mode["health"]
    again = run_json(state, profile_path, "up", "dp2b")
    assert again["action"] == "noop", again
