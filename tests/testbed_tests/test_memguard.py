"""The unified-memory guard, admission and settle on the real testbed: real kernel, real memory.

The lab's nodes share this host's kernel and memory, so MemAvailable, /dev/kmsg and /dev/shm are
the host's. The thresholds are set relative to the MemAvailable measured at the test's start and
the allocations are modest (the machine is shared); every kernel-log line a test writes carries a
marker of its own, and the guard's patterns name that marker, so parallel runs never trip each
other and no line can trip anything outside the testbed.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from sparkctl.profile import load_profile_file
from tests.testbed.profiles import seed_weights, write_lab_profile
from tests.testbed_tests.conftest import cli, cluster_containers

pytestmark = pytest.mark.testbed

GIB = 1 << 30
SOLO = {"nodes": ["spark1"], "tp": 1, "default": True}
ENGINE_IMAGE = "sparkctl-test/engine:latest"


def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemAvailable")


@pytest.fixture
def memlab(lab, tmp_path):
    """(write(memory=..., env=..., engine=...) -> profile path, state dir, marker); cleans up."""
    state = tmp_path / "state"
    marker = f"sparkctl-test-{uuid.uuid4().hex[:12]}"
    written: list[Path] = []
    seed_weights(lab)

    def write(name: str = "p.yaml", memory: dict | None = None, env: dict | None = None, **engine) -> Path:
        mem = {"unified": True, "reserve_gib": 0.25, **(memory or {})}
        # the NVRM pattern only for the user-space line the guard must ignore; the kernel record a
        # test can make is a bridge's (its name at the start of the kernel's message: kernel_record)
        patterns = [f"^NVRM: .*NV_ERR_NO_MEMORY.*{marker}", f"^{bridge_name(marker)}: port "]
        guard = {"enabled": False, "kernel_patterns": patterns}
        mem["guard"] = {**guard, **mem.get("guard", {})}
        eng = {
            "args": {"context-length": 4096, "mem-fraction-static": 0.3},
            "env": env or {},
            "container": {"gpus": False, "shm_size": "64m"},
            **engine,
        }
        path = write_lab_profile(lab, tmp_path / name, modes={"solo": dict(SOLO)}, engine=eng, memory=mem)
        written.append(path)
        return path

    others: list = []
    yield write, state, marker, others
    for c in others:
        c.remove(force=True)
    if written:
        cli(state, written[0], "down")
        cluster = load_profile_file(written[0]).cluster
        assert not any(cluster_containers(lab, cluster).values())


def bystanders(lab, others: list) -> list:
    """A plain container and one labelled for another cluster on spark1: the guard must spare both."""
    client = lab.docker("spark1")
    tag = uuid.uuid4().hex[:8]
    for labels in ({}, {"sparkctl.cluster": f"other{tag}", "sparkctl.rank": "0"}):
        others.append(
            client.containers.run(
                ENGINE_IMAGE,
                ["sleep", "600"],
                entrypoint=[],
                name=f"bystander-{tag}-{len(others)}",
                labels=labels,
                network_mode="host",
                detach=True,
            )
        )
    return others


def guard_trips(state: Path, path: Path, since: float, node: str = "spark1") -> list:
    st = json.loads(cli(state, path, "status", "--json").stdout)
    return [t for t in (st.get("memory_guard", {}).get(node) or {}).get("trips", []) if t["at"] >= since]


def wait_trip(
    state: Path, path: Path, since: float, node: str = "spark1", timeout: float = 90
) -> tuple[dict, list]:
    """`status --json` until the node's guard recorded a trip at or after `since` (the trips file
    on the node outlives a test: the session's lab keeps one cluster name)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = json.loads(cli(state, path, "status", "--json").stdout)
        doc = st.get("memory_guard", {}).get(node) or {}
        trips = [t for t in doc.get("trips", []) if t["at"] >= since]
        if trips:
            return doc, trips
        time.sleep(0.5)
    raise AssertionError(f"no guard trip on {node} within {timeout}s: {st.get('memory_guard')}")


def bridge_name(marker: str) -> str:
    return f"skt{marker[-10:]}"  # a netdev name: at most 15 characters


def kernel_record(marker: str) -> None:
    """Make the kernel itself log a record (facility 0) that starts with a name of ours: a port
    joining a bridge (`<bridge>: port 1(<veth>) entered blocking state`). No NVRM line can be
    made without the driver; what the guard checks (a kernel record, its own start) is the same."""
    br, veth = bridge_name(marker), f"skv{marker[-10:]}"
    try:
        subprocess.run(["ip", "link", "add", br, "type", "bridge"], check=True)
        subprocess.run(["ip", "link", "add", veth, "type", "veth", "peer", "name", veth + "p"], check=True)
        subprocess.run(["ip", "link", "set", veth, "master", br], check=True)
    finally:
        subprocess.run(["ip", "link", "del", veth], check=False, capture_output=True)
        subprocess.run(["ip", "link", "del", br], check=False, capture_output=True)


def low_floor() -> float:
    """A floor (GiB) with MemAvailable between it and twice it: memory "low" for a kernel line,
    not low enough to trip on its own."""
    return round(mem_available() * 0.6 / GIB, 3)


def rank_container(lab, cluster: str):
    (c,) = [
        c
        for c in cluster_containers(lab, cluster)["spark1"]
        if c.labels.get("sparkctl.role", "engine") == "engine"
    ]
    c.reload()
    return c


def test_guard_kills_the_group_when_memory_runs_out(lab, memlab, record_property):
    write, state, _, others = memlab
    floor = (mem_available() - int(1.5 * GIB)) / GIB
    path = write(
        memory={"guard": {"enabled": True, "min_available_gib": round(floor, 3)}},
        env={"STANDIN_ALLOC": "128,0.1,2048"},
    )
    cluster = load_profile_file(path).cluster
    up = cli(state, path, "up", "solo")
    assert up.returncode == 0, up.stderr
    assert "memory guard started on spark1" in up.stdout + up.stderr
    bystanders(lab, others)
    rank = rank_container(lab, cluster)
    since = time.time()
    rank.exec_run(["touch", "/tmp/standin-alloc-go"])  # the "prefill" starts eating memory
    doc, trips = wait_trip(state, path, since)
    trip = trips[-1]
    assert trip["kind"] == "memavailable", trip
    assert trip["mem_available"] < trip["min_available"]
    assert [k["name"] for k in trip["killed"]] == [rank.name]
    assert trip["gone"] and 0 <= trip["kill_ms"] <= trip["gone_ms"]
    rank.reload()
    assert rank.status == "exited" and rank.attrs["State"]["ExitCode"] == 137
    for c in others:
        c.reload()
        assert c.status == "running", c.name  # not sparkctl's, or another cluster's: untouched
    assert doc["running"], "the guard keeps guarding after a trip"
    text = cli(state, path, "status")
    assert "memory guard on spark1: running" in text.stdout and "tripped: MemAvailable" in text.stdout
    logs = cli(state, path, "logs", "solo")
    assert any(x.startswith("guard@spark1") and "killed" in x for x in logs.stdout.splitlines()), logs.stdout
    record_property("figure", f"memory guard: MemAvailable trip -> group gone in {trip['gone_ms']:.0f} ms")


def test_guard_ignores_user_space_lines_and_acts_on_a_kernel_record_with_memory_low(lab, memlab):
    write, state, marker, others = memlab
    path = write(memory={"guard": {"enabled": True, "min_available_gib": low_floor()}})
    cluster = load_profile_file(path).cluster
    assert cli(state, path, "up", "solo").returncode == 0
    bystanders(lab, others)
    rank = rank_container(lab, cluster)
    since = time.time()
    # Written to /dev/kmsg from user space (root, even asking for facility 0 with <3>): the kernel
    # gives it facility 1, and the guard never acts on it, whatever it says.
    with open("/dev/kmsg", "w") as kmsg:
        kmsg.write(f"<3>NVRM: nvAssertOkFailedNoLog: Assertion failed: NV_ERR_NO_MEMORY {marker}\n")
    time.sleep(2)  # the guard polls /dev/kmsg: it would have tripped within milliseconds
    assert not guard_trips(state, path, since)
    rank.reload()
    assert rank.status == "running"
    kernel_record(marker)
    _, (trip,) = wait_trip(state, path, since)
    assert trip["kind"] == "kernel" and trip["line"].startswith(bridge_name(marker) + ": port "), trip
    assert [k["name"] for k in trip["killed"]] == [rank.name]
    rank.reload()
    assert rank.status == "exited"
    for c in others:
        c.reload()
        assert c.status == "running", c.name


def test_admission_refuses_with_a_fix_that_works(lab, memlab):
    write, state, _, _ = memlab
    reserve = round(mem_available() * 0.25 / GIB, 2)
    path = write(memory={"reserve_gib": reserve}, args={"context-length": 4096})  # the 0.9 GB10 cap
    cluster = load_profile_file(path).cluster
    refused = cli(state, path, "up", "solo")
    assert refused.returncode == 3, refused.stderr
    assert "not enough memory to start" in refused.stderr and "host reserve" in refused.stderr
    assert not any(cluster_containers(lab, cluster).values()), "nothing started"
    fix = next(line for line in refused.stderr.splitlines() if "fix:" in line)
    proposed = float(fix.split("--mem-fraction-static ")[1].split()[0].rstrip(":"))
    assert 0 < proposed < 0.9
    fixed = write(
        memory={"reserve_gib": reserve}, args={"context-length": 4096, "mem-fraction-static": proposed - 0.02}
    )
    ok = cli(state, fixed, "up", "solo")
    assert ok.returncode == 0, ok.stderr


def test_restart_after_a_stop_waits_for_memory_to_settle(lab, memlab):
    write, state, _, _ = memlab
    shm = f"sparkctl-test-shm-{uuid.uuid4().hex[:8]}"
    container = {"gpus": False, "ipc": "host"}
    memory = {"settle_margin_gib": 0.5, "settle_timeout": 90}
    first = write(memory=memory, env={"STANDIN_SHM_MB": "1536", "STANDIN_SHM_NAME": shm}, container=container)
    cluster = load_profile_file(first).cluster
    try:
        assert cli(state, first, "up", "solo").returncode == 0
        assert os.path.exists(f"/dev/shm/{shm}")  # resident, and stays so after the container is gone
        released: list[float] = []

        old = rank_container(lab, cluster).id

        def release_later() -> None:  # what the kernel does with a killed engine's memory, slowly
            # counted from the old rank's removal, not from the second `up`'s start (whose
            # preflight may take seconds on a loaded machine)
            while any(c.id == old for c in lab.docker("spark1").containers.list(all=True, sparse=True)):
                time.sleep(0.05)
            time.sleep(3)
            released.append(time.time())
            os.unlink(f"/dev/shm/{shm}")

        second = write("p2.yaml", memory=memory, env={"ROLL": "2"}, container=container)
        threading.Thread(target=release_later, daemon=True).start()
        again = cli(state, second, "up", "solo")
        assert again.returncode == 0, again.stderr
        said = again.stdout + again.stderr
        assert "waiting for memory to settle" in said, said
        assert "memory settled" in said, said
        started = rank_container(lab, cluster).attrs["State"]["StartedAt"]
        from sparkctl.runtime.containers import parse_docker_time

        assert released and released[0] < parse_docker_time(started).timestamp()
    finally:
        if os.path.exists(f"/dev/shm/{shm}"):
            os.unlink(f"/dev/shm/{shm}")


def test_supervisor_keeps_the_guard_and_names_it_as_the_cause(lab, memlab):
    write, state, marker, _ = memlab
    path = write(memory={"guard": {"enabled": True, "min_available_gib": low_floor()}})
    up = cli(state, path, "up", "solo", "--supervise", "--json")
    assert up.returncode == 0, up.stderr
    cluster = load_profile_file(path).cluster
    first = rank_container(lab, cluster)
    kernel_record(marker)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        st = json.loads(cli(state, path, "status", "--json").stdout)
        if any(e["event"] == "restarted" for e in st["restarts"]):
            break
        time.sleep(1)
    events = {e["event"]: e for e in st["events"]}
    assert "guard_tripped" in events and bridge_name(marker) in events["guard_tripped"]["line"], st["events"]
    assert events["restarted"]["cause"].startswith(
        f"the memory guard on spark1 killed the group: kernel: {bridge_name(marker)}: port "
    )
    again = rank_container(lab, cluster)
    assert again.id != first.id and again.status == "running"
    assert st["memory_guard"]["spark1"]["running"], "the guard still guards the restarted group"
