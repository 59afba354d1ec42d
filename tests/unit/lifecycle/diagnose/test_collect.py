"""The diagnose flow (lifecycle/diagnose/collect.py): canaries planted everywhere never reach the
bundle (raw or base64); an unreachable node is listed in the manifest; the sections are there."""

from __future__ import annotations

import base64
import contextlib
import json
import re
import tarfile
from types import SimpleNamespace

from sparkctl.connectors.base import RunResult
from sparkctl.errors import ConnectError
from sparkctl.facts.probe import BATCH_ARGV
from sparkctl.lifecycle.diagnose import diagnose
from sparkctl.lifecycle.diagnose.bundle import MANIFEST
from sparkctl.profile import load_profile_text

ENV_CANARY = "CANARY-env-7f3a9c1e2b"
KEY_CANARY = "CANARY-apikey-0d9e8f7a6b"
FILE_CANARY = "CANARY-file-5c4b3a2918"
TOKEN_CANARY = "hf_CANARYtokenShapedAbCdEf123456"
CANARIES = (ENV_CANARY, KEY_CANARY, FILE_CANARY, TOKEN_CANARY)

PROFILE = """
cluster: c1
nodes:
  - {name: a, address: 10.0.0.1, fabric: {netdevs: [eth1], ip: 192.168.9.1}}
  - {name: b, address: 10.0.0.2, fabric: {netdevs: [eth1], ip: 192.168.9.2}}
  - {name: c, address: 10.0.0.3, fabric: {netdevs: [eth1], ip: 192.168.9.3}}
image: {ref: img:1}
model: {target: {id: org/m}}
engine:
  api_key: {env: DIAG_API_KEY}
  secrets:
    HF_TOKEN: {env: DIAG_HF_TOKEN}
    OTHER: {file: /etc/other-token}
modes: {tp2: {nodes: [a, b], tp: 2}, solo: {nodes: [a], tp: 1, default: true}}
"""


def leaky(node: str) -> str:
    """Output that carries every canary, raw, base64'd inside a blob, and as a token shape."""
    blob = base64.b64encode(f"x{FILE_CANARY}:{ENV_CANARY}y{KEY_CANARY}".encode()).decode()
    return f"{node}: env {ENV_CANARY} key={KEY_CANARY} file {FILE_CANARY} tok {TOKEN_CANARY} b64 {blob}\n"


class Conn:
    def __init__(self, node: str) -> None:
        self.node = node
        self.argvs: list[list[str]] = []

    def run(self, argv, *, timeout=None, input=None) -> RunResult:
        self.argvs.append(list(argv))
        if list(argv) == BATCH_ARGV:
            jobs = json.loads(input)
            out = {
                j["name"]: [0 if j["name"] != "ibv_devinfo.txt" else 127, leaky(self.node), ""] for j in jobs
            }
            return RunResult(self.node, tuple(argv), 0, json.dumps(out), "")
        return RunResult(self.node, tuple(argv), 0, leaky(self.node) * 3, "")

    def get(self, path: str) -> bytes:
        assert path == "/etc/other-token"
        return FILE_CANARY.encode()


class Pool:
    def __init__(self, down: set[str]) -> None:
        self.down, self.conns = down, {}

    def get(self, node: str) -> Conn:
        if node in self.down:
            raise ConnectError("cannot connect: connection refused", node=node)
        return self.conns.setdefault(node, Conn(node))


def decoded_runs(blob: bytes) -> list[bytes]:
    """Every base64-looking run of the bytes, decoded from each of its 4 possible starts (a value
    inside a blob is found whatever its alignment), standard and URL-safe alphabets."""
    out = []
    for run in re.findall(rb"[A-Za-z0-9+/_=-]{12,}", blob):
        for start in range(4):
            chunk = run[start:].rstrip(b"=")
            chunk = chunk[: len(chunk) - len(chunk) % 4]
            for alt in (b"+/", b"-_"):
                with contextlib.suppress(ValueError):
                    out.append(base64.b64decode(chunk, altchars=alt))
    return out


def members(path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def run(tmp_path, monkeypatch, down=frozenset({"b"})):
    monkeypatch.setenv("DIAG_HF_TOKEN", ENV_CANARY)
    monkeypatch.setenv("DIAG_API_KEY", KEY_CANARY)
    monkeypatch.setenv("SPARKCTL_CANARY", ENV_CANARY)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    from sparkctl.lifecycle import state, status
    from sparkctl.preflight import runner

    state.record_event("c1", "restarted", detail=f"rank 1 printed {ENV_CANARY} {TOKEN_CANARY}")
    doc = SimpleNamespace(to_json=lambda: {"finding": f"saw {KEY_CANARY}", "other": FILE_CANARY})
    monkeypatch.setattr(runner, "run_preflight", lambda *a, **k: doc)
    monkeypatch.setattr("sparkctl.preflight.run_preflight", lambda *a, **k: doc)
    monkeypatch.setattr(status, "status", lambda *a, **k: doc)
    lines: list[str] = []
    pool = Pool(set(down))
    got = diagnose(
        load_profile_text(PROFILE), pool, "tp2", tmp_path / "out" / "b.tar.gz", progress=lines.append
    )
    return got, lines, pool


def test_no_canary_in_any_member_raw_or_base64(tmp_path, monkeypatch):
    got, _, _ = run(tmp_path, monkeypatch)
    found = members(got.path)
    assert len(found) > 15
    blob = b"\n".join(found.values())
    # the canaries were in the data this run gathered: masking, not absence, keeps them out
    assert blob.count(b"***") > 20
    for canary in CANARIES:
        for form in (
            canary.encode(),
            base64.b64encode(canary.encode()),
            base64.b64encode(canary.encode()).rstrip(b"="),
        ):
            assert form not in blob, (canary, [n for n, d in found.items() if form in d])
    for data in decoded_runs(blob):  # nor inside any base64 run, at any alignment
        assert not any(c.encode() in data for c in CANARIES), data
    with open(got.path, "rb") as fh:  # nor in the compressed file itself
        assert not any(c.encode() in fh.read() for c in CANARIES)


def test_the_unreachable_node_is_in_the_manifest_and_the_others_are_probed(tmp_path, monkeypatch):
    got, lines, pool = run(tmp_path, monkeypatch)
    found = members(got.path)
    manifest = json.loads(found["sparkctl-diagnose-c1/" + MANIFEST])
    assert manifest["unreachable"] == ["b"]
    assert manifest["nodes"]["b"] == {"reachable": False, "error": "cannot connect: connection refused"}
    assert manifest["nodes"]["a"]["failed"] == {"ibv_devinfo.txt": "exit 127"}
    assert manifest["members"]["logs/rank1.log"]["error"] == "b unreachable"
    names = {n.split("/", 1)[1] for n in found}
    assert {
        "profile.json",
        "plan.json",
        "preflight.json",
        "status.json",
        "events.jsonl",
        "logs/rank0.log",
    } <= names
    assert {"nodes/a/nvidia-smi-q.txt", "nodes/c/kernel-log.txt", "nodes/a/links.txt"} <= names
    assert not any(n.startswith("nodes/b/") for n in names)
    assert any("b: unreachable" in line for line in lines) and any("writing" in line for line in lines)
    assert [a for a in pool.conns["a"].argvs if a == BATCH_ARGV] == [BATCH_ARGV]  # one exec of probes


def test_no_mode_still_bundles_the_node_facts(tmp_path, monkeypatch):
    got, _, _ = run(tmp_path, monkeypatch, down=frozenset())
    assert got.manifest["unreachable"] == []
    monkeypatch.setattr("sparkctl.planning.build.build_plan", _no_plan)
    from sparkctl.lifecycle.diagnose import collect

    plan, why = collect._plan(load_profile_text(PROFILE), "nope")
    assert plan is None and "nope" in why


def _no_plan(*a, **k):
    from sparkctl.errors import UsageError

    raise UsageError("no mode nope")
