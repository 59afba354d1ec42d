"""The gated start of a TP group on the real testbed (issue 43, item 5): `up` starts every rank with
`--gated-launch-port`, the stand-in's ranks rendezvous and block at the gate (as SGLang 0.5.23's
do), sparkctl runs admission on both nodes at that moment, then opens the gate or stops every rank.

The lab's nodes share this host's memory, so MemAvailable is the host's. Each rank holds
STANDIN_GATE_HOLD_MB while it waits at the gate (what a real rank's CUDA context and NCCL buffers
take): the refused case sets the host reserve so that admission before the start passes and the
admission at the gate, which sees at least rank 0's hold, does not. The margins either side are
0.35 x the hold (0.7 GiB), large against what else moves on the machine in a few seconds.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file
from tests.testbed.profiles import seed_weights, write_lab_profile
from tests.testbed_tests.conftest import SOLO, TP2, cli, cluster_containers, standin_record

pytestmark = pytest.mark.testbed

GIB, MIB = 1 << 30, 1 << 20
HOLD_MB = 2048  # per rank, at the gate
FRACTION = 0.3  # --mem-fraction-static: the engine's share admission counts
SHM = 64 * MIB  # engine.container.shm_size below
WAITING, ACTIVATED = "Gated launch waiting for activation.", "Gated launch activated."
ALLOCATED = ("Load weight begin", "KV Cache is allocated", "Uvicorn running")  # the stand-in's


def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemAvailable")


@pytest.fixture
def gatelab(lab, tmp_path):
    """(write(reserve_gib) -> profile path, state dir): a gated tp2 profile; `down` afterwards."""
    state = tmp_path / "state"
    written: list[Path] = []
    seed_weights(lab)

    def write(reserve_gib: float, name: str = "gated.yaml") -> Path:
        engine = {
            "options": {"version": "0.5.23"},  # the stand-in's release: the one with the gate
            "args": {"context-length": 4096, "mem-fraction-static": FRACTION},
            "container": {"gpus": False, "shm_size": "64m"},
            "stop_grace": 5,
        }
        memory = {
            "unified": True,
            "gated_start": True,
            "reserve_gib": reserve_gib,
            "guard": {"enabled": False},
        }
        modes = {"solo": dict(SOLO), "tp2": {**TP2, "env": {"STANDIN_GATE_HOLD_MB": str(HOLD_MB)}}}
        path = write_lab_profile(lab, tmp_path / name, modes=modes, engine=engine, memory=memory)
        written.append(path)
        return path

    yield write, state
    if written:
        cli(state, written[0], "down")
        cluster = load_profile_file(written[0]).cluster
        assert not any(cluster_containers(lab, cluster).values())


def rank_logs(lab, path: Path, want: str, timeout: float = 30) -> dict[int, str]:
    """Each rank's persistent log file (it outlives the container), once every one has `want`."""
    plan = build_plan(load_profile_file(path), "tp2")
    files = {s.rank: Path(lab.node(s.node).node_root, "logs", f"{s.container_name}.log") for s in plan.ranks}
    deadline = time.monotonic() + timeout
    while True:
        texts = {r: (f.read_text() if f.exists() else "") for r, f in files.items()}
        if all(want in t for t in texts.values()) or time.monotonic() >= deadline:
            return texts
        time.sleep(0.2)


def generates(api_base: str, model: str) -> bool:
    body = json.dumps({"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
    req = urllib.request.Request(
        f"{api_base}/chat/completions", data=body.encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return bool(json.loads(resp.read()).get("choices"))


def test_the_plan_shows_the_gate(lab, gatelab):
    write, state = gatelab
    path = write(0.25)
    plan = build_plan(load_profile_file(path), "tp2")
    gate = plan.groups[0].gate
    assert gate is not None and gate.node == "spark1" and gate.nodes == ["spark1", "spark2"]
    for spec in plan.ranks:
        i = spec.argv.index("--gated-launch-port")
        assert spec.argv[i + 1] == str(gate.port)
    shown = cli(state, path, "plan", "tp2")
    assert shown.returncode == 0, shown.stderr
    assert "replica 0 starts gated: --gated-launch-port" in " ".join(shown.stdout.split())


def test_refused_at_the_gate_nothing_allocated_and_every_rank_stopped(lab, gatelab):
    write, state = gatelab
    # passes before the start (0.7 GiB to spare), fails at the gate once rank 0 holds its HOLD_MB
    reserve = ((1 - FRACTION) * (mem_available() - HOLD_MB * MIB / 2) - SHM) / GIB
    path = write(round(reserve, 3))
    cluster = load_profile_file(path).cluster
    res = cli(state, path, "up", "tp2", "--skip-preflight", "--json")
    assert res.returncode == 3, res.stderr
    err = json.loads(res.stdout)["error"]
    assert err["node"] in ("spark1", "spark2"), err
    assert "not enough memory to start" in err["message"], err
    assert (
        "refused at the launch gate" in err["message"]
        and "every rank of the group is stopped" in err["message"]
    )
    assert err["fix"] and "--mem-fraction-static" in err["fix"], err
    assert not any(cluster_containers(lab, cluster).values()), "every rank stopped and removed"
    logs = rank_logs(lab, path, WAITING)
    for rank, text in logs.items():
        assert WAITING in text, (rank, text[-2000:])  # both ranks reached the gate: the refusal came there
        assert ACTIVATED not in text, (rank, text[-2000:])
        assert not any(a in text for a in ALLOCATED), (rank, text[-2000:])  # nothing loaded, no port bound


def test_admitted_at_the_gate_then_the_gate_opens_and_the_group_serves(lab, gatelab):
    write, state = gatelab
    path = write(0.25)
    plan = build_plan(load_profile_file(path), "tp2")
    up = cli(state, path, "up", "tp2", "--skip-preflight")
    assert up.returncode == 0, up.stderr
    said = " ".join((up.stdout + up.stderr).split())
    assert "replica 0: every rank waits at the launch gate" in said and "admission on spark1, spark2" in said
    assert "replica 0: launch gate opened on spark1: the ranks load" in said
    for spec in plan.ranks:
        argv = standin_record(lab, spec.node, spec.container_name)["argv"]
        assert argv[argv.index("--gated-launch-port") + 1] == str(plan.groups[0].gate.port)
    for rank, text in rank_logs(lab, path, "Load weight begin").items():
        order = [text.find(m) for m in (WAITING, ACTIVATED, "Load weight begin", "KV Cache is allocated")]
        assert -1 not in order and order == sorted(order), (rank, order)  # loaded only after the gate
    assert generates(plan.endpoint.api_base, plan.endpoint.served_model_name)
