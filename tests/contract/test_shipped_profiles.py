"""The shipped profiles are a contract: every command on every shipped mode ends and tells the truth.

Parametrised from the files: every profile in profiles/ x every mode in it x every command that
runs without a reachable node. A new shipped profile or mode is covered without a new test.

Commands that touch nodes run on a copy of the profile whose nodes are addressed at 127.0.0.x on a
port nobody listens on (connection refused at once, no traffic leaves loopback), so "unreachable"
is fast and deterministic. Each call has a subprocess timeout: a guard against hangs (the
two-replicas-on-one-box probe deadlock), not a speed assertion.

Asserted for each call: it returns, no traceback, the documented exit code (README table), exactly
one JSON document where --json is given, and no `error` finding for a layout `profile check`
accepts (only the unreachable nodes are errors).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sparkctl.errors import ExitCode
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file

ROOT = Path(__file__).resolve().parents[2]
PROFILES = sorted((ROOT / "profiles").glob("*.yaml"))
HANG_GUARD_S = 300  # the local SGLang parser imports torch: slow on a loaded CI box, never endless
REACH_CHECKS = {"SshReachable"}  # the only errors an unreachable node may cause in preflight


def _fleet(path: Path) -> dict | None:
    """A fleet profile's services (`models:`), else None."""
    return yaml.safe_load(path.read_text()).get("models")


def _modes(path: Path) -> list[str]:
    """Every mode; of a fleet, every SERVICE:MODE (the other services in their default modes)."""
    models = _fleet(path)
    if models:
        return [f"{name}:{mode}" for name, svc in models.items() for mode in svc["modes"]]
    return list(yaml.safe_load(path.read_text())["modes"])


SINGLE = [p for p in PROFILES if not _fleet(p)]
FLEETS = [p for p in PROFILES if _fleet(p)]
CASES = [pytest.param(p, m, id=f"{p.stem}-{m}") for p in PROFILES for m in _modes(p)]
SINGLE_CASES = [pytest.param(p, m, id=f"{p.stem}-{m}") for p in SINGLE for m in _modes(p)]


def _closed_port() -> int:
    """A port on loopback nobody listens on (bound once, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> Path:
    home = tmp_path_factory.mktemp("home")
    (home / "cache").symlink_to(shared_cache)  # the parser's answers, shared with the other suite
    return home


@pytest.fixture(scope="module")
def unreachable(home: Path) -> dict[str, Path]:
    """Each shipped profile with its nodes at 127.0.0.x:<closed port>, a 2 s connect timeout."""
    port = _closed_port()
    out = {}
    for path in PROFILES:
        data = yaml.safe_load(path.read_text())
        for i, node in enumerate(data["nodes"]):
            node["address"] = f"127.0.0.{11 + i}"  # not 127.0.0.1: a router may reach it
            node["port"] = port
        data["ssh"] = {**data.get("ssh", {}), "connect_timeout": 2, "known_hosts": str(home / "known_hosts")}
        copy = home / path.name
        copy.write_text(yaml.safe_dump(data, sort_keys=False))
        out[path.stem] = copy
    return out


def run(home: Path, *args: str, hf_home: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARKCTL_DEBUG", "SPARKCTL_PROFILE", "HF_HOME")}
    if hf_home is not None:
        env["HF_HOME"] = str(hf_home)
    env.update(
        {
            "PYTHONPATH": str(ROOT / "src"),
            "COLUMNS": "80",
            "HOME": str(home),
            "XDG_STATE_HOME": str(home / "state"),
            "XDG_CACHE_HOME": str(home / "cache"),
            # the shipped profiles read these secrets from the environment (sources set: fake values)
            "SPARKCTL_API_KEY": "contract-test-key",
            "HF_TOKEN": "contract-test-token",
        }
    )
    try:
        res = subprocess.run(
            [sys.executable, "-m", "sparkctl", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=HANG_GUARD_S,
            cwd=home,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"`sparkctl {' '.join(args)}` did not return within {HANG_GUARD_S} s: {exc.stderr}")
    assert "Traceback" not in res.stdout + res.stderr, (args, res.stderr)
    return res


def expect(res: subprocess.CompletedProcess, code: int) -> None:
    assert res.returncode == code, (res.args[3:], res.returncode, res.stdout[-2000:], res.stderr[-2000:])


def one_json(res: subprocess.CompletedProcess) -> dict:
    """stdout is exactly one JSON document (nothing before or after it)."""
    text = res.stdout.strip()
    doc, end = json.JSONDecoder().raw_decode(text)
    assert text[end:].strip() == "", f"more than one JSON document: {text[end:][:300]!r}"
    return doc


def error_lines(res: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in (res.stdout + res.stderr).splitlines() if ln.startswith("error")]


@pytest.mark.parametrize("path", PROFILES, ids=[p.stem for p in PROFILES])
def test_profile_check_accepts_every_shipped_profile(home: Path, path: Path) -> None:
    res = run(home, "profile", "check", "-p", str(path))
    expect(res, ExitCode.OK)
    assert res.stdout.startswith("ok profile"), res.stdout


@pytest.mark.parametrize(("path", "mode"), CASES)
def test_plan_and_plan_json(home: Path, path: Path, mode: str) -> None:
    expect(run(home, "plan", mode, "-p", str(path)), ExitCode.OK)
    res = run(home, "plan", mode, "--json", "-p", str(path))
    expect(res, ExitCode.OK)
    doc = one_json(res)
    if _fleet(path):  # every service, its ranks, its budget per node and the sum per node
        service, _, chosen = mode.partition(":")
        assert {s["name"]: s["mode"] for s in doc["services"]}[service] == chosen, doc
        assert all(s["plan"]["ranks"] and s["budget_gib"] for s in doc["services"]), doc
        assert doc["nodes"] and all(n["fits"] and n["capacity_gib"] for n in doc["nodes"]), doc["nodes"]
        return
    assert doc["mode"] == mode and doc["ranks"], doc


@pytest.mark.parametrize(("path", "mode"), CASES)
def test_plan_check_finds_no_error_in_a_shipped_layout(
    home: Path, unreachable: dict[str, Path], path: Path, mode: str
) -> None:
    res = run(home, "plan", mode, "--check", "-p", str(unreachable[path.stem]))
    assert error_lines(res) == [], res.stdout + res.stderr
    expect(res, ExitCode.OK)


@pytest.mark.parametrize(("path", "mode"), CASES)
def test_fit_allow_missing_finds_no_error(
    home: Path, unreachable: dict[str, Path], path: Path, mode: str
) -> None:
    res = run(home, "fit", mode, "--allow-missing", "--json", "-p", str(unreachable[path.stem]))
    doc = one_json(res)
    errors = [f for f in doc["findings"] if f["severity"] == "error"]
    assert errors == [], errors
    expect(res, ExitCode.OK)


# The shipped models' header-only copies in an HF cache: conftest.py's `hf_home`.
# Modes shipped to show a refusal: the checks that refuse them (the profile's comment says why and
# points at `fit`'s layouts). Every other mode must fit with margin.
REFUSED = {("trio-spark", "tp3"): {"TpVsHeads"}}


@pytest.mark.parametrize(("path", "mode"), CASES)
def test_full_fit_with_memory_passes_with_margin(
    home: Path, unreachable: dict[str, Path], hf_home: Path, path: Path, mode: str
) -> None:
    """`fit` with the models on disk: flags, rules and the memory planner, offline (the nodes do
    not answer, so P is the profile's stated assumption). No error, and no memory warning (a launch
    that serves fewer requests than it asks for, or fits with less than the headroom, is a warn)."""
    res = run(home, "fit", mode, "--json", "-p", str(unreachable[path.stem]), hf_home=hf_home)
    doc = one_json(res)
    bad = [
        f
        for f in doc["findings"]
        if f["severity"] == "error" or (f["severity"] == "warn" and f["check"] in ("MemoryFit", "VllmMemory"))
    ]
    refused = REFUSED.get((path.stem, mode))
    if refused:
        assert {f["check"] for f in bad} == refused, bad
        assert any(o["works"] for o in doc["layouts"]), doc["layouts"]  # fit names what works
        expect(res, ExitCode.CHECK_FAILED)
        return
    assert bad == [], bad
    assert any(f["check"] in ("MemoryFit", "VllmMemory") and f["severity"] == "ok" for f in doc["findings"])
    expect(res, ExitCode.OK)


@pytest.mark.parametrize(("path", "mode"), SINGLE_CASES)
def test_preflight_json_against_unreachable_nodes(
    home: Path, unreachable: dict[str, Path], path: Path, mode: str
) -> None:
    res = run(home, "preflight", mode, "--json", "-p", str(unreachable[path.stem]))
    expect(res, ExitCode.CHECK_FAILED)
    doc = one_json(res)
    errors = [f for f in doc["findings"] if f["severity"] == "error"]
    assert errors, "unreachable nodes must be errors"
    allowed = set(REACH_CHECKS)
    shipped = yaml.safe_load(path.read_text())
    if not shipped.get("engine", {}).get("api_key") and any(
        n["address"] == "local" for n in shipped["nodes"]
    ):
        # the copy addresses a `local` node at 127.0.0.x as a remote one: a keyless API on a
        # remote node's address is an ApiExposure error, which the shipped (local) layout is not
        allowed.add("ApiExposure")
    assert {f["check"] for f in errors} <= allowed, [f for f in errors if f["check"] not in allowed]
    reach = {f["node"] for f in errors if f["check"] in REACH_CHECKS}
    assert reach == set(doc["nodes"]), "every node's reason is named"


def _exit_5_naming(res: subprocess.CompletedProcess, nodes: set[str]) -> None:
    expect(res, ExitCode.CONNECT)
    text = " ".join((res.stdout + res.stderr).split())
    assert "more node(s)" not in text, text
    missing = [n for n in sorted(nodes) if n not in text]
    assert not missing, (res.args[3:], missing, text)


@pytest.mark.parametrize("path", SINGLE, ids=[p.stem for p in SINGLE])
def test_state_commands_exit_5_naming_every_node(
    home: Path, unreachable: dict[str, Path], path: Path
) -> None:
    prof = str(unreachable[path.stem])
    every = {n["name"] for n in yaml.safe_load(path.read_text())["nodes"]}
    for args in (["status"], ["down", "--dry-run"]):
        _exit_5_naming(run(home, *args, "-p", prof), every)
    for args in (["status", "--json"], ["down", "--dry-run", "--json"]):
        res = run(home, *args, "-p", prof)
        expect(res, ExitCode.CONNECT)
        one_json(res)
    default = build_plan(load_profile_file(path))
    _exit_5_naming(run(home, "logs", "-p", prof), set(default.all_nodes))
    expect(run(home, "top", "--once", "-p", prof), ExitCode.CONNECT)


@pytest.mark.parametrize(("path", "mode"), SINGLE_CASES)
def test_state_commands_of_a_mode_exit_5_naming_its_nodes(
    home: Path, unreachable: dict[str, Path], path: Path, mode: str
) -> None:
    prof = str(unreachable[path.stem])
    nodes = set(build_plan(load_profile_file(path), mode).all_nodes)
    for args in (["status", mode], ["down", mode, "--dry-run"]):
        _exit_5_naming(run(home, *args, "-p", prof), nodes)
    for args in (["logs", mode, "--json"], ["top", mode, "--once", "--json"]):
        res = run(home, *args, "-p", prof)
        expect(res, ExitCode.CONNECT)
        one_json(res)


# What serves, ships or watches a cluster runs one model per profile today (docs/fleet.md): given a
# fleet it says "not yet", exit 2, before it reaches any node. One JSON document where --json is given.
# `export k8s` renders a fleet (test_a_fleet_exports_every_service_to_kubernetes).
NOT_YET = [["persist", "install"], ["upgrade"]]
# A fleet's commands that run one service: without SERVICE they say so, naming a service to give.
ONE_SERVICE = [
    ["logs", "--json"],
    ["preflight", "--json"],
    ["ship", "--dry-run"],
    ["diagnose"],
    ["verify"],
]
# ... and with one, or of the whole fleet: they reach for its nodes (unreachable here: exit 3).
REACH = [
    ["up", "--dry-run"],
    ["up", "chat"],
    ["down", "--dry-run"],
    ["down", "coder"],
    ["switch", "chat", "solo"],
    ["status", "--json"],
    ["logs", "chat"],
    ["top", "--once"],  # every service's screen, one under the other
]


@pytest.mark.parametrize("path", FLEETS, ids=[p.stem for p in FLEETS])
def test_a_fleet_is_served_service_by_service_and_says_what_it_needs(
    home: Path, unreachable: dict[str, Path], path: Path
) -> None:
    prof = str(unreachable[path.stem])
    for args in NOT_YET:
        res = run(home, *args, "-p", prof)
        expect(res, ExitCode.USAGE)
        text = " ".join(res.stderr.split())
        assert (
            f"not yet: `sparkctl {' '.join(args[:2] if args[0] == 'persist' else args[:1])}` runs one model"
            in text
        )
        assert "docs/fleet.md" in text, text
    for args in ONE_SERVICE:
        res = run(home, *args, "-p", prof)
        expect(res, ExitCode.USAGE)
        said = one_json(res)["error"]["message"] if "--json" in args else " ".join(res.stderr.split())
        assert f"`sparkctl {args[0]}` runs one service of this fleet" in said, (args, said)
        if "--json" not in args:
            assert f"fix: name it: `sparkctl -p {prof} {args[0]} chat`" in said, said
    for args in REACH:
        res = run(home, *args, "-p", prof)
        expect(res, ExitCode.CONNECT)
        said = res.stdout + res.stderr
        assert "Traceback" not in said and "127.0.0.1" in said, (args, said[-2000:])
    res = run(home, "preflight", "coder", "-p", prof)  # a failed check, as for any profile
    expect(res, ExitCode.CHECK_FAILED)
    assert "preflight failed" in res.stdout and "coder" in res.stdout, res.stdout[-2000:]


FLEET_CASES = [pytest.param(p, m, id=f"{p.stem}-{m}") for p in FLEETS for m in _modes(p)]


@pytest.mark.parametrize(("path", "mode"), FLEET_CASES)
def test_a_fleet_exports_every_service_to_kubernetes(
    home: Path, unreachable: dict[str, Path], path: Path, mode: str
) -> None:
    """`export k8s SERVICE:MODE` of a fleet: every service's LeaderWorkerSet, touching no node."""
    prof = str(unreachable[path.stem])
    res = run(home, "export", "k8s", mode, "--dry-run", "-p", prof)
    expect(res, ExitCode.OK)
    assert res.stdout.count("kind: LeaderWorkerSet") == len(_fleet(path) or {}), res.stdout
    res = run(home, "export", "k8s", mode, "--dry-run", "--json", "-p", prof)
    expect(res, ExitCode.OK)
    doc = one_json(res)
    assert sorted(s["name"] for s in doc["services"]) == sorted(_fleet(path) or {})
    assert mode in doc["selection"].split(","), doc


@pytest.mark.parametrize("path", FLEETS, ids=[p.stem for p in FLEETS])
def test_a_fleet_over_a_node_is_refused_and_its_fix_is_accepted(home: Path, path: Path) -> None:
    """Every flag of a shipped fleet doubled (and every service on GPU 0 where modes name GPUs):
    refused at `plan` with the per-node sums and a fix; the fix written into the profile, `plan`
    and `plan --check` accept it."""
    import re

    data = yaml.safe_load(path.read_text())
    for svc in data["models"].values():
        for mode in svc["modes"].values():
            if "gpu_ids" in mode:
                mode["gpu_ids"] = [0]
        args = svc["engine"]["args"]
        for flag in ("mem-fraction-static", "gpu-memory-utilization"):
            if flag in args:
                args[flag] = min(0.9, args[flag] * 2)
    over = home / f"over-{path.name}"
    over.write_text(yaml.safe_dump(data, sort_keys=False))
    res = run(home, "plan", "-p", str(over))
    expect(res, ExitCode.USAGE)
    text = " ".join(res.stderr.split())
    assert "the services' memory does not fit" in text and "GiB" in text, text
    edits = re.findall(r"(models\.[\w.-]+\.args\.[\w-]+): ([\d.]+)", text)
    assert edits, text
    for key, value in edits:
        _, name, *where, flag = key.split(".")
        at = data["models"][name]
        for k in where:
            at = at[k]
        at[flag] = float(value)
    over.write_text(yaml.safe_dump(data, sort_keys=False))
    expect(run(home, "plan", "-p", str(over)), ExitCode.OK)
    res = run(home, "plan", "--check", "-p", str(over))
    assert error_lines(res) == [], res.stdout + res.stderr
    expect(res, ExitCode.OK)


@pytest.mark.parametrize("path", FLEETS, ids=[p.stem for p in FLEETS])
def test_a_third_service_that_does_not_fit_is_refused_before_anything_starts(
    home: Path, unreachable: dict[str, Path], path: Path
) -> None:
    """A third (pinned) service, the coder again under another name with a large flag: `up` and
    `preflight` refuse it before they reach a node (unreachable here: that would be exit 3), with
    the per-node sums and a fix, which `plan --check` then accepts."""
    import re

    data = yaml.safe_load(unreachable[path.stem].read_text())
    third = yaml.safe_load(yaml.safe_dump(data["models"]["coder"]))
    third["engine"]["args"]["gpu-memory-utilization"] = 0.6
    third["engine"].pop("port", None)
    data["models"]["third"] = third
    over = home / f"third-{path.name}"
    over.write_text(yaml.safe_dump(data, sort_keys=False))
    for args in (["up"], ["up", "third"], ["preflight", "third"]):
        res = run(home, *args, "-p", str(over))
        expect(res, ExitCode.USAGE)
        text = " ".join(res.stderr.split())
        assert "the services' memory does not fit" in text and "third" in text and " of " in text, (
            args,
            text,
        )
    edits = re.findall(r"(models\.[\w.-]+\.args\.[\w-]+): ([\d.]+)", text)
    assert edits, text
    for key, value in edits:
        _, name, *where, flag = key.split(".")
        at = data["models"][name]
        for k in where:
            at = at[k]
        at[flag] = float(value)
    over.write_text(yaml.safe_dump(data, sort_keys=False))
    res = run(home, "plan", "--check", "-p", str(over))
    assert error_lines(res) == [], res.stdout + res.stderr
    expect(res, ExitCode.OK)
