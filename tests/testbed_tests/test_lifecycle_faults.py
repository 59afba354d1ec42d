"""Fail fast, stop fast, heal: signals, lost nodes, JSON errors and group restarts on the real testbed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import docker.errors
import pytest

from sparkctl.planning.build import build_plan
from sparkctl.planning.gateway import served_container
from sparkctl.profile import load_profile_file
from tests.testbed.profiles import write_lab_profile
from tests.testbed_tests.conftest import SOLO, TP2, cli, cluster_containers

pytestmark = pytest.mark.testbed


def signals_seen(lab, node: str, cluster: str, since: float) -> dict[str, list]:
    """Per container on `node`: the signals Docker sent it ('15', '9') and its exit codes, in order."""
    out: dict[str, list] = {}
    for ev in lab.docker(node).events(
        since=int(since) - 1,
        until=int(time.time()) + 1,
        decode=True,
        filters={"label": f"sparkctl.cluster={cluster}"},
    ):
        attrs = ev.get("Actor", {}).get("Attributes", {})
        if ev.get("Action") == "kill":
            out.setdefault(attrs.get("name"), []).append(f"sig{attrs.get('signal')}")
        elif ev.get("Action") == "die":
            out.setdefault(attrs.get("name"), []).append(f"exit{attrs.get('exitCode')}")
    return out


def engine_signals(lab, cluster: str, t0: float) -> dict[str, list[str]]:
    """The ranks' signals and exits on both nodes. Rank 0's gateway is left out: it is removed
    (SIGKILL) once its engine is gone, as it has nothing in flight of its own to finish."""
    seen = {**signals_seen(lab, "spark1", cluster, t0), **signals_seen(lab, "spark2", cluster, t0)}
    return {name: s for name, s in seen.items() if served_container(name) is None}


def running(lab, cluster: str, node: str) -> list[str]:
    """Names of the cluster's running containers on `node` (sparse list: no race with removals)."""
    found = lab.docker(node).containers.list(sparse=True, filters={"label": f"sparkctl.cluster={cluster}"})
    return [c.attrs["Names"][0].lstrip("/") for c in found]


def wait_for(what: str, cond, timeout: float = 60, every: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def test_stop_path_sigterm_then_sigkill_and_rollback_kills_at_once(lab, setup, tmp_path):
    state = setup[1]
    setup[0]()  # the fixture's first profile: its teardown runs `down` for this cluster

    def profile(name: str, env: dict, grace: int) -> Path:
        modes = {"solo": {**SOLO, "env": env}, "tp2": {**TP2, "env": env}}
        return write_lab_profile(lab, tmp_path / name, modes=modes, engine={"stop_grace": grace})

    # An engine with no SIGTERM handler: Docker's init forwards SIGTERM, so it stops without SIGKILL.
    plain = profile("plain.yaml", {"STANDIN_SIGTERM": "default"}, grace=30)
    cluster = load_profile_file(plain).cluster
    assert cli(state, plain, "up", "tp2", "--skip-preflight").returncode == 0
    for spec in build_plan(load_profile_file(plain), "tp2").ranks:
        assert lab.docker(spec.node).api.inspect_container(spec.container_name)["HostConfig"]["Init"] is True
    t0 = time.time()
    assert cli(state, plain, "down").returncode == 0
    seen = engine_signals(lab, cluster, t0)
    assert all("sig9" not in s for s in seen.values()), seen  # never needed SIGKILL
    # A rank may exit first because its peer went (exit 3); the other died of the SIGTERM itself.
    assert any(s[:2] == ["sig15", "exit143"] for s in seen.values()), seen

    # An engine that ignores SIGTERM: SIGTERM, the profile's grace, then SIGKILL (exit 137).
    deaf = profile("deaf.yaml", {"STANDIN_SIGTERM": "ignore"}, grace=1)
    assert cli(state, deaf, "up", "tp2", "--skip-preflight").returncode == 0
    t0 = time.time()
    down = cli(state, deaf, "down", "--json")
    assert down.returncode == 0, down.stderr
    removed = json.loads(down.stdout)["removed"]
    assert sorted(c["role"] for c in removed) == ["engine", "engine", "gateway"]
    seen = engine_signals(lab, cluster, t0)
    # SIGTERM stopped nobody; SIGKILL after the grace did (the peer may exit first, exit 3).
    assert any(s[:3] == ["sig15", "sig9", "exit137"] for s in seen.values()), seen
    assert not any(x in ("exit0", "exit143") for s in seen.values() for x in s), seen
    assert not any(cluster_containers(lab, cluster).values())

    # A failed start is rolled back with SIGKILL at once, even with a long grace.
    failing = profile(
        "failing.yaml",
        {"STANDIN_SIGTERM": "ignore", "STANDIN_FAIL_AT": "1:load", "STANDIN_DELAY_LOAD": "1"},
        grace=120,
    )
    t0 = time.time()
    res = cli(state, failing, "up", "tp2", "--skip-preflight")
    assert res.returncode == 3, res.stderr
    assert "rank 1 exited (exit code 1) while starting" in " ".join(res.stderr.split())
    for node in ("spark1", "spark2"):
        for name, seen in signals_seen(lab, node, cluster, t0).items():
            assert "sig15" not in seen, (node, name, seen)
    assert not any(cluster_containers(lab, cluster).values())


def test_node_lost_during_up_then_reconciled(lab, setup):
    write_profile, state = setup
    path = write_profile(tp2={"STANDIN_DELAY_LOAD": "60"})
    prof = load_profile_file(path)
    plan = build_plan(prof, "tp2")
    env = {**os.environ, "XDG_STATE_HOME": str(state), "COLUMNS": "200"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkctl", "up", "tp2", "--skip-preflight", "--json", "-p", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        names = [s.container_name for s in plan.ranks]
        wait_for("rank 1 running", lambda: running(lab, prof.cluster, "spark2"))
        wait_for("rank 0 running", lambda: running(lab, prof.cluster, "spark1"))
        lab.stop_sshd("spark2", kill_sessions=True)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 5, err
    error = json.loads(out)["error"]
    assert error["code"] == 5 and error["node"] == "spark2", error
    flat = " ".join(err.split())
    assert "lost the connection to node spark2" in flat
    assert f"rank 1 ({names[1]}) may still be running on spark2: recorded for cleanup" in flat
    # The truth: rank 0 was rolled back, rank 1 still runs on the lost node.
    left = cluster_containers(lab, prof.cluster)
    assert left["spark1"] == [] and [c.name for c in left["spark2"]] == [names[1]]

    st = cli(state, path, "status")
    assert st.returncode == 5, st.stderr
    text = " ".join(st.stdout.split())
    assert f"cluster {prof.cluster}: nothing running on spark1; unknown on spark2 (unreachable)" in text
    assert f"spark2 may still run {names[1]}" in text
    js = json.loads(cli(state, path, "status", "--json").stdout)
    assert js["unknown"] == ["spark2"] and js["pending_cleanup"][0]["container"] == names[1]

    lab.start_sshd("spark2")
    st = cli(state, path, "status")
    assert st.returncode == 0, st.stdout + st.stderr
    text = " ".join(st.stdout.split())
    assert f"spark2 reachable again: removed {names[1]} (rank 1 of tp2)" in text
    assert not any(cluster_containers(lab, prof.cluster).values())
    again = cli(state, path, "status", "--json")
    assert json.loads(again.stdout)["pending_cleanup"] == [] and json.loads(again.stdout)["settled"] == []


def test_down_reconciles_a_lost_nodes_leftover(lab, setup):
    write_profile, state = setup
    path = write_profile(tp2={"STANDIN_DELAY_LOAD": "60"})
    prof = load_profile_file(path)
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkctl", "up", "tp2", "--skip-preflight", "-p", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    wait_for("rank 1 running", lambda: running(lab, prof.cluster, "spark2"))
    wait_for("rank 0 running", lambda: running(lab, prof.cluster, "spark1"))
    lab.stop_sshd("spark2", kill_sessions=True)
    proc.communicate(timeout=120)
    assert proc.returncode == 5
    down = cli(state, path, "down", "--json")
    assert down.returncode == 5
    assert json.loads(down.stdout)["error"]["node"] == "spark2"
    lab.start_sshd("spark2")
    down = cli(state, path, "down")
    assert down.returncode == 0, down.stderr
    assert "spark2 reachable again: removed" in " ".join(down.stdout.split())
    assert not any(cluster_containers(lab, prof.cluster).values())


def test_json_error_object_on_failure(lab, setup):
    write_profile, state = setup
    path = write_profile(tp2={"STANDIN_FAIL_AT": "1:load", "STANDIN_DELAY_LOAD": "2"})
    res = cli(state, path, "up", "tp2", "--skip-preflight", "--json")
    assert res.returncode == 3
    obj = json.loads(res.stdout)  # exactly one JSON object on stdout
    assert obj["ok"] is False
    err = obj["error"]
    assert (err["code"], err["node"], err["rank"]) == (3, "spark2", 1)
    assert "rank 1 exited" in err["message"] and "sparkctl logs --rank 1" in err["fix"]
    assert any("injected failure at phase load" in line for log in err["logs"] for line in log["lines"])

    lab.stop_sshd("spark2")
    res = cli(state, path, "down", "--json")
    assert res.returncode == 5
    err = json.loads(res.stdout)["error"]
    assert err["code"] == 5 and err["node"] == "spark2" and err["fix"]


def gone(pid: int) -> bool:
    """The process has exited (a zombie not yet reaped by its new parent counts as exited)."""
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    except FileNotFoundError:
        return True


def _generates(plan) -> bool:
    body = json.dumps(
        {
            "model": plan.endpoint.served_model_name,
            "max_tokens": 1,
            "messages": [{"role": "user", "content": "hi"}],
        }
    ).encode()
    req = urllib.request.Request(
        f"{plan.endpoint.api_base}/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return bool(json.loads(resp.read()).get("choices"))
    except OSError:
        return False


def test_supervised_group_restarts_when_a_rank_dies(lab, setup):
    write_profile, state = setup
    path = write_profile()
    prof = load_profile_file(path)
    plan = build_plan(prof, "tp2")
    res = cli(state, path, "up", "tp2", "--skip-preflight", "--supervise", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    start_s, pid = out["elapsed_s"], out["supervisor"]["pid"]
    old = {s.rank: lab.docker(s.node).containers.get(s.container_name).id for s in plan.ranks}
    wait_for(
        "the supervisor watching",
        lambda: any(
            e["event"] == "supervising"
            for e in json.loads(cli(state, path, "status", "--json").stdout)["events"]
        ),
    )

    killed = time.monotonic()
    lab.kill_container("spark2", plan.rank(1).container_name)

    def restarted() -> bool:
        try:
            new = {s.rank: lab.docker(s.node).containers.get(s.container_name).id for s in plan.ranks}
        except Exception:  # noqa: BLE001 - between remove and create
            return False
        return all(new[r] != old[r] for r in new) and _generates(plan)

    wait_for("the group serving again", restarted, timeout=120, every=0.05)
    print(f"serving again {time.monotonic() - killed:.2f}s after the kill (start took {start_s:.2f}s)")

    st = cli(state, path, "status", "--json")
    js = json.loads(st.stdout)
    assert js["supervisor"]["pid"] == pid
    done = wait_for(
        "the restart event",
        lambda: [
            e
            for e in json.loads(cli(state, path, "status", "--json").stdout)["restarts"]
            if e["event"] == "restarted"
        ],
    )  # noqa: E501
    assert done[0]["cause"] == "rank 1 on spark2 exited (exit code 137)" and done[0]["rank"] == 1
    assert done[0]["seen_by"] == "docker events" and done[0]["since_exit_s"] >= 0  # not a poll
    text = " ".join(cli(state, path, "status").stdout.split())
    assert "supervisor: running" in text and "1 group restart(s)" in text
    assert "group restarted because rank 1 on spark2 exited (exit code 137)" in text
    logs = cli(state, path, "logs", "--tail", "50")
    assert any(
        line.startswith("supervisor") and "rank 1 on spark2 exited" in line
        for line in logs.stdout.splitlines()
    ), logs.stdout

    # A switch replaces the group: the old supervisor goes first (or it would restart tp2).
    sw = cli(state, path, "switch", "solo", "--skip-preflight", "--supervise", "--json")
    assert sw.returncode == 0, sw.stderr
    assert f"stopped the supervisor (pid {pid}, mode tp2)" in sw.stderr
    pid2 = json.loads(sw.stdout)["supervisor"]["pid"]
    assert pid2 != pid and gone(pid)
    assert cluster_containers(lab, prof.cluster)["spark2"] == []

    down = cli(state, path, "down")
    assert down.returncode == 0 and f"stopped the supervisor (pid {pid2}, mode solo)" in down.stdout
    assert gone(pid2)
    assert not any(cluster_containers(lab, prof.cluster).values())


def test_supervisor_restarts_on_failed_canaries_then_gives_up_at_the_limit(lab, setup):
    write_profile, state = setup
    path = write_profile(solo={"STANDIN_STALL_AFTER": "2"})
    assert cli(state, path, "up", "solo", "--skip-preflight").returncode == 0
    sup = cli(
        state,
        path,
        "supervise",
        "--detach",
        "--canary-every",
        "0.5",
        "--canary-failures",
        "2",
        "--max-restarts",
        "1",
        "--backoff",
        "0",
    )
    assert sup.returncode == 0 and "supervising mode solo in the background" in sup.stdout, sup.stderr

    def events() -> list[dict]:
        return json.loads(cli(state, path, "status", "--json").stdout)["events"]

    # /v1/models and /health keep answering: only the generation canary sees the engine is stuck.
    wait_for(
        "the supervisor to give up",
        lambda: any(e["event"] == "gave_up" for e in events()),
        timeout=120,
        every=0.5,
    )
    kinds = [e["event"] for e in events()]
    assert kinds.count("restarted") == 1 and kinds.count("canary_failed") >= 4, kinds
    restarted = next(e for e in events() if e["event"] == "restarted")
    assert restarted["cause"].startswith("generation canary failed 2 times in a row: HTTPError")
    text = " ".join(cli(state, path, "status").stdout.split())
    assert "supervisor: not running" in text and "gave up restarting after 'generation canary failed" in text


def test_a_fabric_partition_is_found_by_the_heartbeat_and_the_group_held_until_it_heals(lab, setup):
    """spark2's fabric cable pulled (SSH, on the management network, stays up): the supervisor's
    heartbeat, not the canary, finds it within its bound, names the pair and the link, removes the
    group and holds it; the cable back, it starts the group again."""
    from sparkctl.lifecycle.supervisor.heartbeat import SILENT_S

    write_profile, state = setup
    path = write_profile()
    plan = build_plan(load_profile_file(path), "tp2")
    res = cli(state, path, "up", "tp2", "--skip-preflight", "--supervise", "--json")
    assert res.returncode == 0, res.stderr

    def events() -> list[dict]:
        return json.loads(cli(state, path, "status", "--json").stdout)["events"]

    wait_for("the supervisor watching", lambda: any(e["event"] == "supervising" for e in events()))
    cut, cut_at = time.monotonic(), time.time()
    lab.set_fabric_link("spark2", up=False)
    try:
        hold = wait_for(
            "the partition hold",
            lambda: [e for e in events() if e["event"] == "partition_hold"],
            timeout=60,
            every=0.2,
        )[0]
        decided = next(e for e in events() if e["event"] == "partition")["at"] - cut_at
        print(
            f"partition decided {decided:.2f}s after the cut (silent {hold['silent_s']}s), group removed"
            f" {hold['at'] - cut_at:.2f}s, seen here {time.monotonic() - cut:.2f}s"
        )
        assert hold["detected_by"] == "heartbeat"
        assert hold["link"].startswith(lab.node(hold["peer"]).fabric_ip + ":")  # the fabric, not mgmt
        assert {hold["node"], hold["peer"]} == {"spark1", "spark2"}
        assert hold["silent_s"] >= SILENT_S  # the rule; how soon is printed above, not bounded here
        kinds = [e["event"] for e in events()]
        assert "canary_failed" not in kinds[: kinds.index("partition_hold")]  # the heartbeat, first
        wait_for(
            "the group removed", lambda: not any(running(lab, plan.cluster, n) for n in ("spark1", "spark2"))
        )
    finally:
        lab.set_fabric_link("spark2", up=True)
    wait_for("the link back", lambda: any(e["event"] == "link_back" for e in events()), timeout=60, every=0.2)
    wait_for("the group serving again", lambda: _generates(plan), timeout=120, every=0.2)
    restarted = wait_for(
        "the restart", lambda: [e for e in events() if e["event"] == "restarted"], timeout=60
    )[0]
    assert restarted["cause"].startswith("fabric partition: ") and restarted["detected_by"] == "heartbeat"
    assert cli(state, path, "down").returncode == 0


def test_an_orphaned_headless_rank_is_stopped_when_its_rank_0_dies(lab, setup):
    """rank 0 killed: Docker's event stream wakes the supervisor, which stops the headless rank 1
    (left alone, it would live on) as the group restarts; the events say how long after the exit."""
    write_profile, state = setup
    path = write_profile()
    plan = build_plan(load_profile_file(path), "tp2")
    res = cli(state, path, "up", "tp2", "--skip-preflight", "--supervise", "--json")
    assert res.returncode == 0, res.stderr
    orphan = lab.docker("spark2").containers.get(plan.rank(1).container_name)

    def events() -> list[dict]:
        return json.loads(cli(state, path, "status", "--json").stdout)["events"]

    wait_for("the supervisor watching", lambda: any(e["event"] == "supervising" for e in events()))
    killed = time.monotonic()
    lab.kill_container("spark1", plan.rank(0).container_name)

    removed = wait_for("the group removed", lambda: [e for e in events() if e["event"] == "group_removed"])[0]
    print(
        f"rank 1 stopped {removed['since_exit_s']}s after rank 0's exit ({time.monotonic() - killed:.2f}s seen here)"
    )
    assert removed["rank"] == 0 and removed["seen_by"] == "docker events"
    with pytest.raises(docker.errors.NotFound):  # stopped by the supervisor, or exited on its own
        orphan.reload()
    wait_for("the group serving again", lambda: _generates(plan), timeout=120, every=0.2)
    assert lab.docker("spark2").containers.get(plan.rank(1).container_name).id != orphan.id
    assert cli(state, path, "down").returncode == 0
