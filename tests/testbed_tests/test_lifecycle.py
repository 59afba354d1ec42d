"""Lifecycle on the real testbed (2 nodes, real sshd + dockerd, stand-in engine), via the real CLI."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from sparkctl.engines import get_engine
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file
from tests.testbed_tests.conftest import cli, cluster_containers, engine_containers, standin_record

pytestmark = pytest.mark.testbed


FOLLOWED = '"POST /v1/chat/completions HTTP/1.1" 200'  # the test's only chat request


def post(plan, route: str, body: dict) -> None:
    """A request whose line in the engine's log marks it (the gateway passes exact targets only,
    so no query string can)."""
    data = json.dumps({"model": "tiny-test", "max_tokens": 2, **body}).encode()
    req = urllib.request.Request(
        f"{plan.endpoint.api_base}/{route}", data, {"Content-Type": "application/json"}
    )
    urllib.request.urlopen(req, timeout=5).read()


def follow_logs_sees_new_lines(state: Path, path: Path, plan) -> None:
    """`logs -f` prints both ranks, then a line written after it started; Ctrl-C ends it cleanly."""
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkctl", "logs", "-f", "--tail", "3", "-p", str(path)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    seen: list[str] = []
    try:
        for i in range(600):
            with contextlib.suppress(queue.Empty):
                seen.append(lines.get(timeout=0.1))
            prefixes = {x.split(" | ")[0] for x in seen}
            if i % 10 == 0 and {"rank0@spark1", "rank1@spark2"} <= prefixes:
                post(plan, "chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
            if any(FOLLOWED in x for x in seen):
                break
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert {"rank0@spark1", "rank1@spark2"} <= {x.split(" | ")[0] for x in seen}
    assert any(FOLLOWED in x for x in seen), seen
    assert proc.returncode == 0


def test_up_tp2_status_logs_switch_down(lab, setup):
    write_profile, state = setup
    path = write_profile()
    prof = load_profile_file(path)
    plan = build_plan(prof, "tp2")

    res = cli(state, path, "up", "--tp", "2", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["action"] == "started" and out["mode"] == "tp2" and out["health"]["ready"]

    # Each rank's container runs exactly what the plan says.
    for spec in plan.ranks:
        c = lab.docker(spec.node).containers.get(spec.container_name)
        assert c.status == "running"
        assert [*c.attrs["Config"]["Entrypoint"], *c.attrs["Config"]["Cmd"]] == spec.argv
        assert {k: v for k, v in c.labels.items() if k.startswith("sparkctl.")} == spec.labels
        rec = standin_record(lab, spec.node, spec.container_name)
        assert (
            rec["argv"]
            == spec.argv[len(prof.engine.command or get_engine(prof.engine.kind).default_command) :]
        )
        assert {k: rec["env"].get(k) for k in spec.env} == spec.env
        assert (
            c.attrs["HostConfig"]["NetworkMode"] == "host" and c.attrs["HostConfig"]["IpcMode"] == "private"
        )
    models = json.loads(urllib.request.urlopen(f"{plan.endpoint.api_base}/models", timeout=5).read())
    assert [m["id"] for m in models["data"]] == ["tiny-test"]

    st = cli(state, path, "status", "--json")
    assert st.returncode == 0, st.stderr
    status = json.loads(st.stdout)
    assert sorted((c["role"], c["rank"], c["node"], c["status"]) for c in status["containers"]) == [
        ("engine", 0, "spark1", "running"),
        ("engine", 1, "spark2", "running"),
        ("gateway", 0, "spark1", "running"),  # rank 0's API: the only public listener
    ]
    assert status["modes"][0]["mode"] == "tp2" and status["modes"][0]["health"]["ready"]
    assert (
        status["modes"][0]["config_hash"] == plan.config_hash
        and status["modes"][0]["config_changed"] is False
    )

    # The log files keep growing after `up` returned: a request made now shows up in rank 0's file.
    marker = '"POST /v1/completions HTTP/1.1" 200'  # the test's only completion
    post(plan, "completions", {"prompt": "after-up"})
    for _ in range(50):
        logs = cli(state, path, "logs", "--tail", "200")
        if marker in logs.stdout:
            break
        time.sleep(0.2)
    assert logs.returncode == 0, logs.stderr
    assert marker in logs.stdout
    assert any(line.startswith("rank0@spark1 | ") for line in logs.stdout.splitlines())
    assert any(
        line.startswith("rank1@spark2 | ") and "Dummy health" in line for line in logs.stdout.splitlines()
    )
    follow_logs_sees_new_lines(state, path, plan)
    only1 = cli(state, path, "logs", "--rank", "1")
    assert only1.stdout and all(line.startswith("rank1@spark2") for line in only1.stdout.splitlines())

    # Same config again: a no-op that touches nothing.
    ids = {n: [c.id for c in cs] for n, cs in cluster_containers(lab, prof.cluster).items()}
    again = cli(state, path, "up", "tp2", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["action"] == "noop"
    assert {n: [c.id for c in cs] for n, cs in cluster_containers(lab, prof.cluster).items()} == ids

    sw = cli(state, path, "switch", "solo")
    assert sw.returncode == 0, sw.stderr
    assert "ready" in sw.stdout and "tiny-test" in sw.stdout and "curl" in sw.stdout
    after = cluster_containers(lab, prof.cluster, gateways=False)
    assert after["spark2"] == []
    assert [c.name for c in after["spark1"]] == [build_plan(prof, "solo").rank(0).container_name]
    assert after["spark1"][0].labels["sparkctl.mode"] == "solo"

    down = cli(state, path, "down")
    assert down.returncode == 0, down.stderr
    assert not any(cluster_containers(lab, prof.cluster).values())
    again = cli(state, path, "down")
    assert again.returncode == 0 and "nothing running" in again.stdout


def test_changed_config_restarts_ranks(lab, setup):
    write_profile, state = setup
    path = write_profile()
    assert cli(state, path, "up", "solo", "--skip-preflight").returncode == 0
    (old,) = engine_containers(lab, "spark1", "sparkctl.mode=solo")
    changed = write_profile("changed.yaml", solo={"EXTRA_SETTING": "1"})
    res = cli(state, changed, "up", "solo", "--skip-preflight", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["action"] == "started"
    new = engine_containers(lab, "spark1", "sparkctl.mode=solo")
    assert [c.id for c in new] != [old.id] and len(new) == 1
    assert standin_record(lab, "spark1", new[0].name)["env"]["EXTRA_SETTING"] == "1"


def test_rank1_failing_at_load_rolls_back_with_its_logs(lab, setup):
    write_profile, state = setup
    path = write_profile(tp2={"STANDIN_FAIL_AT": "1:load", "STANDIN_DELAY_LOAD": "2"})
    res = cli(state, path, "up", "tp2", "--skip-preflight")
    assert res.returncode == 3, res.stdout + res.stderr
    assert "--- rank 1 on spark2" in res.stderr
    assert "injected failure at phase load" in res.stderr
    assert "rank 1 exited (exit code 1) while starting" in " ".join(res.stderr.split())
    assert not any(cluster_containers(lab, load_profile_file(path).cluster).values())  # rank 0 removed too
    # The rolled-back rank's log is still on its node.
    logs = cli(state, path, "logs", "--rank", "1", "--mode", "tp2")
    assert "injected failure at phase load" in logs.stdout


def test_rank0_never_ready_hits_the_deadline(lab, setup):
    write_profile, state = setup
    path = write_profile(solo={"STANDIN_NEVER_READY": "1"})
    res = cli(state, path, "up", "solo", "--skip-preflight", "--timeout", "5")
    assert res.returncode == 3, res.stdout + res.stderr
    err = " ".join(res.stderr.split())
    assert "not ready within the 5s deadline" in err
    assert "--- rank 0 on spark1" in res.stderr and "never becoming ready" in res.stderr
    assert not any(cluster_containers(lab, load_profile_file(path).cluster).values())


def test_concurrent_up_refuses_and_ctrl_c_rolls_back(lab, setup):
    write_profile, state = setup
    path = write_profile(solo={"STANDIN_NEVER_READY": "1"})
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    first = subprocess.Popen(
        [sys.executable, "-m", "sparkctl", "up", "solo", "--skip-preflight", "-p", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    cluster = load_profile_file(path).cluster
    try:
        # Wait until the first one has started its rank (it holds the lock from before that).
        for _ in range(300):
            if lab.docker("spark1").containers.list(filters={"label": f"sparkctl.cluster={cluster}"}):
                break
            time.sleep(0.1)
        second = cli(state, path, "up", "solo", "--skip-preflight")
        assert second.returncode == 4, second.stdout + second.stderr
        err = " ".join(second.stderr.split())
        assert f"pid {first.pid}" in err and re.search(r"sparkctl (-p \S+ )?up solo", err)
    finally:
        first.send_signal(signal.SIGINT)
        out, _ = first.communicate(timeout=60)
    assert first.returncode == 130, out
    assert not any(cluster_containers(lab, cluster).values())
    # The lock went with its holder: the next operation goes ahead.
    assert cli(state, path, "down").returncode == 0


def test_lock_of_a_killed_holder_is_recovered(lab, setup):
    write_profile, state = setup
    path = write_profile()
    cluster = load_profile_file(path).cluster
    code = (
        "import sys, time; from sparkctl.lifecycle.lock import ClusterLock; "
        f"ClusterLock({cluster!r}, 'sparkctl up (killed)').acquire(); print('held', flush=True); time.sleep(600)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "XDG_STATE_HOME": str(state)},
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        refused = cli(state, path, "down")
        assert refused.returncode == 4 and "sparkctl up (killed)" in refused.stderr
    finally:
        holder.kill()
        holder.wait()
    assert cli(state, path, "down").returncode == 0
