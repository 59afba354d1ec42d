"""`sparkctl diagnose` on the real testbed: one node's sshd stopped, the bundle is still written,
names that node as unreachable, and holds none of the canaries planted in the profile's env
secret, a node's secret file, the ranks' logs and the events log (raw or base64)."""

from __future__ import annotations

import base64
import json
import os
import tarfile
import time
from pathlib import Path

import pytest

from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file
from tests.testbed.lab import NODE_MOUNT
from tests.testbed.profiles import write_lab_profile
from tests.testbed_tests.conftest import SOLO, TP2, cli, report
from tests.unit.lifecycle.diagnose.test_collect import decoded_runs

pytestmark = pytest.mark.testbed

ENV_CANARY = "CANARY-diag-env-41c9e2"
KEY_CANARY = "CANARY-diag-key-7b2d10"
FILE_CANARY = "CANARY-diag-file-9e8a55"
LOG_TOKEN = "hf_CANARYdiagTokenAbCdEfGh123456"


def test_diagnose_with_a_node_unreachable_lists_it_and_leaks_no_canary(
    lab, setup, tmp_path, monkeypatch, request
):
    _, state = setup
    setup[0]()  # the fixture's profile: its teardown runs `down` for the cluster
    for node in lab.nodes:
        Path(node.node_root, "diag-token").write_text(FILE_CANARY + "\n")
    engine = {
        "api_key": {"env": "DIAG_API_KEY"},
        "secrets": {"HF_TOKEN": {"env": "DIAG_HF_TOKEN"}, "OTHER": {"file": f"{NODE_MOUNT}/diag-token"}},
    }
    path = write_lab_profile(lab, tmp_path / "sparkctl.yaml", modes={"solo": SOLO, "tp2": TP2}, engine=engine)
    monkeypatch.setenv("DIAG_HF_TOKEN", ENV_CANARY)
    monkeypatch.setenv("DIAG_API_KEY", KEY_CANARY)
    prof = load_profile_file(path)
    assert cli(state, path, "up", "tp2", "--skip-preflight").returncode == 0
    blob = base64.b64encode(f"{ENV_CANARY}|{FILE_CANARY}".encode()).decode()
    for spec in build_plan(prof, "tp2").ranks:  # what a leaky engine could print
        node = lab.node(spec.node)
        log = Path(node.node_root, "logs", f"{spec.container_name}.log")
        with log.open("a") as fh:
            fh.write(f"env {ENV_CANARY} file {FILE_CANARY} key {KEY_CANARY} tok {LOG_TOKEN} b64 {blob}\n")
    out = tmp_path / "bundle.tar.gz"
    lab.stop_sshd("spark2", kill_sessions=True)
    t0 = time.monotonic()
    try:
        res = cli(state, path, "diagnose", "tp2", "-o", str(out), "--json", timeout=240)
        report(request, f"diagnose tp2 with spark2 unreachable: {time.monotonic() - t0:.1f}s")
    finally:
        lab.start_sshd("spark2")
    assert res.returncode == 0, res.stderr
    assert "diagnose: spark2: unreachable" in res.stderr and "diagnose: writing" in res.stderr
    doc = json.loads(res.stdout)
    assert doc["manifest"]["unreachable"] == ["spark2"]
    with tarfile.open(out) as tar:
        found = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers()}
    manifest = json.loads(found["manifest.json"])
    assert manifest["unreachable"] == ["spark2"] and manifest["nodes"]["spark1"]["reachable"]
    assert {"profile.json", "plan.json", "preflight.json", "status.json", "events.jsonl"} <= set(found)
    assert b"MemTotal" in found["nodes/spark1/memory.txt"] and b"mtu=" in found["nodes/spark1/links.txt"]
    assert b"Server Version" in found["nodes/spark1/docker-info.txt"]
    assert b"***" in found["logs/rank0.log"]  # the planted line was read, and masked
    assert "error" in manifest["members"]["logs/rank1.log"]
    everything = b"\n".join(found.values())
    for canary in (ENV_CANARY, KEY_CANARY, FILE_CANARY, LOG_TOKEN):
        b64 = base64.b64encode(canary.encode())
        for form in (canary.encode(), b64, b64.rstrip(b"=")):
            assert form not in everything, (canary, [n for n, d in found.items() if form in d])
    for data in decoded_runs(everything):  # nor inside any base64 run, at any alignment
        assert not any(c.encode() in data for c in (ENV_CANARY, KEY_CANARY, FILE_CANARY)), data
    assert os.stat(out).st_mode & 0o077 == 0
