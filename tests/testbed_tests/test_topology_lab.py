"""Replica groups and N-node TP on a real 4-node lab, through the real CLI (issue #19).

One 4-node lab for the module (labs are slow to start): `up tp4`, `up dp2` with sglang-router
(the real one, from the serving image) spreading requests over both replicas, `up tp2x2` keeping
that router, a killed replica taken out by the router while requests go on and reported by
`status`, `down` leaving nothing; then failures: a rank dying in one group, a router that cannot
start - each rolled back completely.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file
from tests.conftest import require_testbed
from tests.testbed import routerlab
from tests.testbed.lab import Lab
from tests.testbed.profiles import seed_weights, topology_modes, write_lab_profile
from tests.testbed.routerlab import replica_of, steady_load, wait_for
from tests.testbed_tests.conftest import cli, cluster_containers, report, rolled_under_load, standin_record

pytestmark = pytest.mark.testbed
ROUTER = {"policy": "round_robin", "health_check_interval": 1, "health_failure_threshold": 2}


@pytest.fixture(scope="module")
def quad() -> Iterator[Lab]:
    require_testbed()
    with Lab(nodes=4) as lab:
        lab.install_engine_image()
        seed_weights(lab)
        yield lab


@pytest.fixture(scope="module")
def cluster(quad: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(state dir, profile) for the module, as `cli` takes them; everything of the cluster is
    removed afterwards."""
    tmp = tmp_path_factory.mktemp("topology")
    modes = {"solo": {"nodes": ["spark1"], "tp": 1, "default": True}, **topology_modes()}
    # node rank 1 of every group dies while loading: a failure inside a replica group
    modes["tp2x2_broken"] = {**topology_modes()["tp2x2"], "env": {"STANDIN_FAIL_AT": "1:load"}}
    modes["dp2_never"] = {**topology_modes()["dp2"], "env": {"STANDIN_NEVER_READY": "1"}}
    # two TP=2 replicas that roll: metrics on (the drain signal), requests taking a while
    rollable = {**topology_modes()["tp2x2"], "args": {"enable-metrics": True}}
    modes["tp2x2r"] = {**rollable, "env": {"STANDIN_GEN_DELAY": "1"}}
    modes["tp2x2rb"] = {**rollable, "env": {"STANDIN_GEN_DELAY": "1", "ROLL_MARK": "b"}}
    path = write_lab_profile(quad, tmp / "sparkctl.yaml", modes=modes, router=ROUTER)
    yield tmp / "state", path
    cli(tmp / "state", path, "down")
    assert not any(cluster_containers(quad, load_profile_file(path).cluster).values())


def _status_of(url: str) -> int:
    """HTTP status of a GET from the controller, keyless and with no proxy."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def up(cluster: tuple[Path, Path], mode: str) -> dict:
    res = cli(*cluster, "up", mode, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def status(cluster: tuple[Path, Path]) -> dict:
    res = cli(*cluster, "status", "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def chat(base: str, key: str | None = None) -> tuple[int, str]:
    """(HTTP status, answer text or error) of one chat request for the lab profile's model."""
    return routerlab.chat(base, model="tiny-test", key=key)


def spread(base: str, n: int = 8) -> Counter:
    answers = [chat(base) for _ in range(n)]
    assert all(code == 200 for code, _ in answers), answers
    return Counter(replica_of(text) for _, text in answers)


def running(lab: Lab, cluster: str) -> dict[str, list[str]]:
    return {
        n: sorted(c.name for c in cs if c.status == "running")
        for n, cs in cluster_containers(lab, cluster, gateways=False).items()
    }


def test_up_tp4_runs_one_group_over_four_nodes(quad: Lab, cluster) -> None:
    prof = load_profile_file(cluster[1])
    plan = build_plan(prof, "tp4")
    out = up(cluster, "tp4")
    assert out["action"] == "started" and out["health"]["ready"] and out["router"] is None
    for spec in plan.ranks:  # the stand-in did its TCP rendezvous over the fabric with all four
        argv = standin_record(quad, spec.node, spec.container_name)["argv"]
        assert argv[argv.index("--nnodes") + 1] == "4" and argv[argv.index("--node-rank") + 1] == str(
            spec.rank
        )
        assert argv[argv.index("--dist-init-addr") + 1] == plan.dist_init_addr
    assert spread(plan.endpoint.url, 2) == {"spark1": 2}  # rank 0 serves (its hostname)
    st = status(cluster)
    assert [(m["mode"], m["health"]["ready"], m["replicas"], m["router"]) for m in st["modes"]] == [
        ("tp4", True, [], None)
    ]


def test_up_dp2_puts_the_router_in_front_and_requests_reach_both_replicas(quad: Lab, cluster) -> None:
    prof = load_profile_file(cluster[1])
    plan = build_plan(prof, "dp2")
    assert plan.router is not None
    out = up(cluster, "dp2")  # a switch from tp4: its four ranks go first
    assert out["action"] == "started" and out["router"]["node"] == "spark1"
    assert running(quad, prof.cluster) == {
        "spark1": sorted([plan.ranks[0].container_name, plan.router.container_name]),
        "spark2": [plan.ranks[1].container_name],
        "spark3": [],
        "spark4": [],
    }
    got = spread(plan.endpoint.url)  # the user's one endpoint: the router's
    print(f"8 requests through the router: {dict(got)}")
    assert got == {"spark1": 4, "spark2": 4}
    # What sglang-router answers without a key stays on its node: its gateway refuses it here (the
    # controller), and the router's own port (on 127.0.0.1 of spark1) takes no connection from here.
    assert plan.router.gateway is not None
    for route in ("/engine_metrics", "/get_server_info", "/ENGINE_METRICS/"):
        assert _status_of(plan.endpoint.url + route) == 404, route
    assert _status_of(plan.endpoint.url + "/workers") == 200  # the worker API sparkctl uses passes
    with pytest.raises(OSError):
        socket.create_connection((quad.node("spark1").mgmt_ip, plan.router.gateway.upstream_port), timeout=5)

    st = status(cluster)
    [mode] = st["modes"]
    assert mode["health"]["ready"] and mode["endpoint"] == plan.endpoint.url
    assert sorted((w["url"], w["healthy"]) for w in mode["router"]["workers"]) == [
        (g.worker_url, True) for g in plan.groups
    ]
    assert [(r["index"], r["node"], r["state"], r["router"]) for r in mode["replicas"]] == [
        (0, "spark1", "ready", "healthy"),
        (1, "spark2", "ready", "healthy"),
    ]
    # verify and bench go through the router
    verify = cli(*cluster, "verify", "--only", "ChatStream", "--only", "ChatToolChoiceNone", "--json")
    assert verify.returncode == 0, verify.stderr
    assert json.loads(verify.stdout)["url"] == plan.endpoint.url
    bench = cli(*cluster, "bench", "-w", "code", "--reps", "1", "--max-tokens", "8", "--json")
    assert bench.returncode == 0, bench.stderr
    assert json.loads(bench.stdout)["url"] == plan.endpoint.url
    logs = cli(*cluster, "logs", "--router", "--tail", "500")
    assert logs.returncode == 0, logs.stderr
    lines = logs.stdout.splitlines()
    assert lines and all(line.startswith("router@spark1 | ") for line in lines)
    assert "\x1b[" not in logs.stdout  # plain text (the router colours its lines)

    again = up(cluster, "dp2")
    assert again["action"] == "noop"

    # The router gone while the replicas run: `up` starts the router alone.
    ranks = {s.container_name: quad.docker(s.node).containers.get(s.container_name).id for s in plan.ranks}
    quad.docker("spark1").containers.get(plan.router.container_name).remove(force=True)
    assert up(cluster, "dp2")["action"] == "router"
    assert {
        s.container_name: quad.docker(s.node).containers.get(s.container_name).id for s in plan.ranks
    } == ranks
    assert spread(plan.endpoint.url, 4) == {"spark1": 2, "spark2": 2}


def test_up_tp2x2_keeps_the_router_and_gives_it_the_new_replicas(quad: Lab, cluster) -> None:
    prof = load_profile_file(cluster[1])
    plan = build_plan(prof, "tp2x2")
    assert plan.router is not None
    router_id = quad.docker("spark1").containers.get(plan.router.container_name).id
    out = up(cluster, "tp2x2")
    assert out["action"] == "started"
    # Same router config: the container stays; its worker set became tp2x2's heads (spark1, spark3).
    assert quad.docker("spark1").containers.get(plan.router.container_name).id == router_id
    for g in plan.groups:  # each group has its own rendezvous
        for n in g.ranks:
            spec = plan.rank(n)
            argv = standin_record(quad, spec.node, spec.container_name)["argv"]
            assert argv[argv.index("--dist-init-addr") + 1] == g.dist_init_addr
            assert argv[argv.index("--nnodes") + 1] == "2"
    assert len({g.dist_init_addr for g in plan.groups}) == 2
    assert spread(plan.endpoint.url) == {"spark1": 4, "spark3": 4}
    [mode] = status(cluster)["modes"]
    assert sorted(w["url"] for w in mode["router"]["workers"]) == sorted(g.worker_url for g in plan.groups)


def test_a_killed_replica_is_taken_out_by_the_router_and_status_says_so(quad: Lab, cluster) -> None:
    prof = load_profile_file(cluster[1])
    plan = build_plan(prof, "tp2x2")
    assert up(cluster, "tp2x2")["action"] == "noop"
    dead = plan.rank(plan.groups[1].ranks[0])  # replica 1's head on spark3
    # a steady client through the router while a replica dies
    with steady_load(lambda: chat(plan.endpoint.url)) as results:
        wait_for("requests flowing", lambda: len(results) >= 4)
        quad.kill_container(dead.node, dead.container_name)

        def router_marks_it() -> dict | None:
            [mode] = status(cluster)["modes"]
            return mode if mode["replicas"][1]["router"] == "unhealthy" else None

        mode = wait_for("the router to mark replica 1 unhealthy", router_marks_it, timeout=60)
        after = len(results)
        wait_for("requests after the replica was taken out", lambda: len(results) >= after + 6)
    failed = [r for r in results if r[0] != 200]
    print(f"{len(results)} requests while replica 1 died, {len(failed)} failed")
    assert not failed, failed[:3]
    assert {replica_of(text) for _, text in results[after:]} == {"spark1"}
    rep = mode["replicas"][1]
    assert rep["state"] == "down" and rep["node"] == "spark3"
    assert f"rank {dead.rank} on spark3" in rep["problem"] and "sparkctl up tp2x2" in rep["fix"]
    assert mode["replicas"][0]["state"] == "ready"
    text = cli(*cluster, "status")
    assert "degraded (1 of 2 replicas serving)" in text.stdout and "router: unhealthy" in text.stdout

    # `up` brings the replica back behind the same router, restarting only it (a rolling
    # restart: replica 0 keeps serving).
    router_id = quad.docker("spark1").containers.get(plan.router.container_name).id
    out = up(cluster, "tp2x2")
    assert out["action"] == "rolled" and [r["action"] for r in out["rolling"]] == ["skipped", "rolled"]
    assert quad.docker("spark1").containers.get(plan.router.container_name).id == router_id
    assert set(spread(plan.endpoint.url)) == {"spark1", "spark3"}


def test_a_single_replica_mode_removes_the_router_and_down_leaves_nothing(quad: Lab, cluster) -> None:
    prof = load_profile_file(cluster[1])
    router = build_plan(prof, "tp2x2").router
    assert router is not None
    assert up(cluster, "solo")["router"] is None
    assert running(quad, prof.cluster) == {
        "spark1": [build_plan(prof, "solo").ranks[0].container_name],
        "spark2": [],
        "spark3": [],
        "spark4": [],
    }
    assert up(cluster, "dp2")["action"] == "started"  # the router back, for `down` to remove
    res = cli(*cluster, "down", "--json")
    assert res.returncode == 0, res.stderr
    removed = {c["name"] for c in json.loads(res.stdout)["removed"]}
    assert "sparkctl-" + load_profile_file(cluster[1]).cluster + "-router" in removed
    assert not any(cluster_containers(quad, load_profile_file(cluster[1]).cluster).values())


def test_a_rank_dying_in_a_group_fails_up_naming_it_and_rolls_back_every_group(quad: Lab, cluster) -> None:
    res = cli(*cluster, "up", "tp2x2_broken")
    assert res.returncode == 3, res.stderr
    err = res.stderr
    assert "node rank 1" in err and "(replica " in err and "exited (exit code 1)" in err, err
    assert "spark2" in err or "spark4" in err
    assert not any(running(quad, load_profile_file(cluster[1]).cluster).values())


def test_a_replica_never_ready_fails_up_at_the_deadline_naming_it_and_rolls_back(quad: Lab, cluster) -> None:
    prof = load_profile_file(cluster[1])
    plan = build_plan(prof, "dp2_never")
    res = cli(*cluster, "up", "dp2_never", "--timeout", "10")
    assert res.returncode == 3, res.stderr
    flat = " ".join(res.stderr.split())
    assert f"replica 0's endpoint {plan.groups[0].worker_url} not ready within the 10s deadline" in flat, flat
    assert "[node spark1, rank 0]" in flat
    assert not any(cluster_containers(quad, prof.cluster).values())  # no router was started either


def test_a_router_that_cannot_start_fails_up_with_its_log_and_rolls_back(quad: Lab, cluster) -> None:
    state, path = cluster
    broken = write_lab_profile(
        quad,
        path.parent / "broken-router.yaml",
        modes=topology_modes(),
        router={**ROUTER, "command": ["python3", "-m", "no_such_router"]},
    )
    res = cli(state, broken, "up", "dp2")
    assert res.returncode == 3, res.stderr
    assert "[node spark1] the router (sparkctl-" in res.stderr and "exited (exit code 1)" in res.stderr
    assert "No module named no_such_router" in res.stderr  # its log, shown
    assert not any(cluster_containers(quad, load_profile_file(broken).cluster).values())


def test_with_an_api_key_the_router_gets_it_off_its_command_line_and_up_status_use_it(
    quad: Lab, cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-lab-router-key-0451"
    monkeypatch.setenv("SPARKCTL_LAB_KEY", key)  # `cli` passes this environment on
    state, path = cluster
    keyed = write_lab_profile(
        quad,
        path.parent / "keyed.yaml",
        modes=topology_modes(),
        router=ROUTER,
        engine={"api_key": {"env": "SPARKCTL_LAB_KEY"}},
    )
    prof = load_profile_file(keyed)
    plan = build_plan(prof, "dp2")
    assert plan.router is not None
    try:
        res = cli(state, keyed, "up", "dp2", "--json")
        assert res.returncode == 0, res.stderr  # it read /workers, which wants the key
        assert key not in res.stdout + res.stderr
        attrs = quad.docker("spark1").containers.get(plan.router.container_name).attrs
        assert key not in json.dumps(attrs)  # not in its argv, env or labels
        assert chat(plan.endpoint.url)[0] == 401
        answers = [chat(plan.endpoint.url, key) for _ in range(4)]
        assert {replica_of(text) for code, text in answers if code == 200} == {"spark1", "spark2"}
        st = cli(state, keyed, "status", "--json")
        assert st.returncode == 0 and key not in st.stdout
        [mode] = json.loads(st.stdout)["modes"]
        assert mode["router"]["error"] is None and [w["healthy"] for w in mode["router"]["workers"]] == [
            True,
            True,
        ]
    finally:
        cli(state, keyed, "down")
    assert not any(cluster_containers(quad, prof.cluster).values())


def test_rolling_switch_of_tp_groups_moves_each_group_as_one_replica(cluster, quad, request) -> None:
    """tp2x2r -> tp2x2rb under streaming load: each TP=2 group (two ranks on two nodes) leaves the
    router, drains, restarts with its new rendezvous and comes back; no request fails."""
    state, path = cluster
    prof = load_profile_file(path)
    up(cluster, "tp2x2r")
    url = build_plan(prof, "tp2x2r").endpoint.url
    out, stats = rolled_under_load(state, path, url, "switch", "tp2x2rb")
    report(request, f"rolling switch of two TP=2 groups (4 nodes) under load: {stats.line()}")
    assert stats.failed == 0, stats.line()
    new = build_plan(prof, "tp2x2rb")
    assert out["action"] == "rolled"
    assert [(r["index"], r["action"]) for r in out["rolling"]] == [(0, "rolled"), (1, "rolled")]
    running = {
        c.name: c.labels["sparkctl.config_hash"]
        for cs in cluster_containers(quad, prof.cluster).values()
        for c in cs
        if c.labels.get("sparkctl.role", "engine") == "engine" and c.status == "running"
    }
    assert running == {r.container_name: new.config_hash for r in new.ranks}  # all 4 ranks, new config


def test_the_supervisor_restarts_only_the_replica_that_died(quad: Lab, cluster) -> None:
    """`up --supervise` on a mode with replicas: a replica whose rank dies is restarted alone and
    put back in the router; the other replica and the router are not touched, no request fails."""
    prof = load_profile_file(cluster[1])
    plan = build_plan(prof, "dp2")
    res = cli(*cluster, "up", "dp2", "--supervise", "--json")
    assert res.returncode == 0, res.stderr
    keep, dead = plan.rank(plan.groups[0].ranks[0]), plan.rank(plan.groups[1].ranks[0])
    assert plan.router is not None and dead.node == "spark2"

    def ids() -> dict[str, str]:
        return {
            s.container_name: quad.docker(s.node).containers.get(s.container_name).id
            for s in (keep, dead, plan.router)
        }

    before = ids()
    try:
        with steady_load(lambda: chat(plan.endpoint.url)) as results:
            wait_for("requests flowing", lambda: len(results) >= 4)
            quad.kill_container(dead.node, dead.container_name)

            def restarted() -> list[dict]:
                return [e for e in status(cluster)["restarts"] if e["event"] == "restarted"]

            (event,) = wait_for("the supervisor to restart replica 1", restarted, timeout=120)
            after = len(results)
            wait_for("requests after the restart", lambda: len(results) >= after + 6)
        failed = [r for r in results if r[0] != 200]
        print(f"{len(results)} requests while replica 1 died and came back, {len(failed)} failed")
        assert not failed, failed[:3]
        assert event["replica"] == 1 and event["rank"] == dead.rank
        now = ids()
        assert now[dead.container_name] != before[dead.container_name]  # replica 1: a new container
        assert {k: now[k] for k in (keep.container_name, plan.router.container_name)} == {
            k: before[k] for k in (keep.container_name, plan.router.container_name)
        }  # replica 0 and the router: never restarted
        assert set(spread(plan.endpoint.url)) == {"spark1", "spark2"}  # both serve again
        text = " ".join(cli(*cluster, "status").stdout.split())
        assert f"replica 1 restarted because rank {dead.rank} on spark2 exited" in text
    finally:
        assert cli(*cluster, "down").returncode == 0  # stops the supervisor too


def test_up_dp2_with_a_key_serves_when_the_node_user_is_not_root(
    quad: Lab, cluster, monkeypatch, tmp_path
) -> None:
    """Issue 38: the router's and the gateways' key files are the node user's (0400) and their
    containers run as that user with no capability: `up dp2` with a key, logged in as a user who
    is not root (in the docker group, as a Spark's user is), serves through the router."""
    import subprocess

    key = "sk-lab-nonroot-key-9090"
    monkeypatch.setenv("SPARKCTL_LAB_KEY", key)
    state, path = cluster
    name = f"sparkctlu{quad.id}"[:31]
    home = tmp_path / "home"
    home.mkdir()
    subprocess.run(
        ["useradd", "-M", "-d", str(home), "-p", "*", "-s", "/bin/bash", "-G", "docker", name], check=True
    )
    try:
        uid = int(subprocess.run(["id", "-u", name], capture_output=True, text=True, check=True).stdout)
        subprocess.run(["chown", "-R", f"{name}:", str(home)], check=True)
        for node in quad.nodes:  # the node user's own directories, as on a Spark
            for sub in ("logs", "triton"):
                Path(node.node_root, sub).mkdir(parents=True, exist_ok=True)
                subprocess.run(["chown", "-R", f"{name}:", str(Path(node.node_root, sub))], check=True)
        doc = write_lab_profile(
            quad, path.parent / "nonroot.yaml", modes=topology_modes(), router=ROUTER,
            engine={"api_key": {"env": "SPARKCTL_LAB_KEY"}},
        )  # fmt: skip
        text = doc.read_text().replace("user: root", f"user: {name}")
        doc.write_text(text)
        prof = load_profile_file(doc)
        plan = build_plan(prof, "dp2")
        assert plan.router is not None and {n.user for n in prof.nodes} == {name}
        res = cli(state, doc, "up", "dp2", "--json")
        assert res.returncode == 0, res.stdout + res.stderr
        router = quad.docker("spark1").containers.get(plan.router.container_name)
        assert router.attrs["Config"]["User"].split(":")[0] == str(uid)  # the node user, not root
        gateway = quad.docker("spark1").containers.get(f"{plan.router.container_name}-gateway")
        assert gateway.attrs["Config"]["User"].split(":")[0] == str(uid)
        assert chat(plan.endpoint.url)[0] == 401
        answers = [chat(plan.endpoint.url, key) for _ in range(4)]
        assert {replica_of(text) for code, text in answers if code == 200} == {"spark1", "spark2"}, answers
    finally:
        cli(state, path.parent / "nonroot.yaml", "down")
        subprocess.run(["userdel", "-f", name], check=False)
    assert not any(cluster_containers(quad, f"lab{quad.id}").values())
