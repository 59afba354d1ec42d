"""A local user who binds the engine's upstream port before the engine never gets a key (issue 38).

The stand-in engine loads for a while (STANDIN_DELAY_LOAD) before it binds 127.0.0.1:20000
(STANDIN_BIND_AFTER_LOAD), as SGLang does after its model load; another user (uid 65534) binds that port first with a server
that records every request it gets. The gateway's owner check (planning/gateway_owner.py) keeps
its one server in maintenance while a foreign uid holds the port: readiness and a client's keyed
requests get 503, the squatter records nothing, the gateway's log names the uid, and `up` fails
when the engine cannot bind, leaving nothing behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.testbed.profiles import ENGINE_PORT

pytestmark = pytest.mark.testbed

API_KEY = "sk-sparkctl-squat-canary-55443322"
INTERNAL = ENGINE_PORT - 10000
SQUATTER = r"""
import http.server, json, sys
log = open(sys.argv[2], "a")
class H(http.server.BaseHTTPRequestHandler):
    def _any(self):
        log.write(json.dumps({"path": self.path, "headers": dict(self.headers)}) + "\n"); log.flush()
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"{}")
    do_GET = do_POST = _any
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _status(url: str, key: str | None) -> int:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:  # nothing listens yet (before the gateway starts, after the rollback)
        return 0


def _squat(lab, where: Path) -> subprocess.Popen:
    """Another user (uid 65534) binds the engine's internal port; returns once it listens."""
    squat = subprocess.Popen(
        [*lab.node("spark1").nsenter(), "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
         "python3", "-c", SQUATTER, str(INTERNAL), str(where / "squatter.jsonl")],
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not lab.exec("spark1", ["ss", "-Hltn", f"sport = :{INTERNAL}"], check=False).stdout.strip():
        assert time.monotonic() < deadline and squat.poll() is None, "the squatter binds"
        time.sleep(0.1)
    return squat


def _profile(write_profile, monkeypatch) -> Path:
    path = write_profile(solo={"STANDIN_DELAY_LOAD": "15", "STANDIN_BIND_AFTER_LOAD": "1"})
    doc = yaml.safe_load(path.read_text())
    doc["engine"].update(api_key={"env": "SPARKCTL_TEST_API_KEY"}, expose="private", ready_timeout=60)
    path.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("SPARKCTL_TEST_API_KEY", API_KEY)
    return path


def _records(where: Path) -> list[dict]:
    seen = where / "squatter.jsonl"
    return [json.loads(line) for line in seen.read_text().splitlines()] if seen.exists() else []


def test_a_squatter_before_up_is_named_by_preflight(lab, setup, monkeypatch) -> None:
    write_profile, state = setup
    path = _profile(write_profile, monkeypatch)
    where = Path(tempfile.mkdtemp(prefix="sparkctl-squat-"))
    where.chmod(0o777)
    squat = _squat(lab, where)
    try:
        res = subprocess.run(
            [sys.executable, "-m", "sparkctl", "up", "solo", "-p", str(path)],
            env={**os.environ, "XDG_STATE_HOME": str(state), "COLUMNS": "200"},
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        squat.kill()
        squat.wait()
    assert res.returncode != 0 and f"port {INTERNAL}" in res.stdout + res.stderr, res.stdout + res.stderr
    assert "behind the gateway" in res.stdout + res.stderr
    assert _records(where) == []


def test_a_squatter_during_the_load_never_receives_a_key(lab, setup, monkeypatch) -> None:
    write_profile, state = setup
    path = _profile(write_profile, monkeypatch)
    where = Path(tempfile.mkdtemp(prefix="sparkctl-squat-"))
    where.chmod(0o777)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkctl", "up", "solo", "--json", "-p", str(path)],
        env={**os.environ, "XDG_STATE_HOME": str(state), "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    docker = lab.docker("spark1")
    deadline = time.monotonic() + 120
    while not [c for c in docker.containers.list() if c.name.endswith("-gateway")]:
        assert time.monotonic() < deadline and proc.poll() is None, "the gateway starts"
        time.sleep(0.1)
    squat = _squat(lab, where)  # while the engine loads: it binds only after STANDIN_DELAY_LOAD
    base = f"http://{lab.node('spark1').mgmt_ip}:{ENGINE_PORT}"
    answers = []
    try:
        while proc.poll() is None:  # a client with the key, all through the start
            answers.append(_status(f"{base}/v1/models", API_KEY))
            time.sleep(0.5)
            if len(answers) == 6:
                (gateway,) = [c for c in docker.containers.list() if c.name.endswith("-gateway")]
                gate_log = gateway.logs().decode()
        out, err = proc.communicate()
    finally:
        squat.kill()
        squat.wait()
    records = _records(where)
    assert not any(API_KEY in json.dumps(r) for r in records), records
    assert not any("authorization" in {k.lower() for k in r["headers"]} for r in records), records
    assert answers.count(503) >= 6 and set(answers) <= {0, 503}, answers
    assert "port 20000 is held by uid 65534, not the engine's uid 0" in gate_log, gate_log
    assert proc.returncode != 0, out + err  # the engine could not bind its port
    print(
        f"a squatter on {INTERNAL} during the load: {answers.count(503)} keyed requests answered 503, none reached it"
    )


def test_a_gateway_gone_beside_a_running_rank_is_replaced_alone(lab, setup, monkeypatch) -> None:
    """`up` finds the rank up to date and its gateway gone: it starts only the gateway (the engine
    keeps its container and its load), and the API answers again."""
    from tests.testbed_tests.conftest import cli

    write_profile, state = setup
    path = write_profile()
    doc = yaml.safe_load(path.read_text())
    doc["engine"].update(api_key={"env": "SPARKCTL_TEST_API_KEY"}, expose="private")
    path.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("SPARKCTL_TEST_API_KEY", API_KEY)
    assert cli(state, path, "up", "solo").returncode == 0
    docker = lab.docker("spark1")
    (rank,) = [c for c in docker.containers.list() if c.labels.get("sparkctl.cluster") == doc["cluster"]
               and c.labels.get("sparkctl.role", "engine") == "engine"]  # fmt: skip
    docker.containers.get(f"{rank.name}-gateway").remove(force=True)
    base = f"http://{lab.node('spark1').mgmt_ip}:{ENGINE_PORT}"
    assert _status(f"{base}/v1/models", API_KEY) == 0  # nothing on the API port
    again = cli(state, path, "up", "solo", "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    out = json.loads(again.stdout)
    assert out["action"] == "gateway" and out["health"]["ready"], again.stderr
    assert docker.containers.get(rank.name).id == rank.id  # the engine was not restarted
    assert _status(f"{base}/v1/models", API_KEY) == 200
    cli(state, path, "down")


ALICE = "sk-alice-named-canary-7788"


def test_named_keys_are_counted_limited_and_revoked_by_up_without_an_engine_restart(
    lab, setup, monkeypatch
) -> None:
    """engine.api_keys: alice's key serves (the engine sees only its own), her fourth request in a
    minute gets 429 (per_minute: 3), status counts her requests, and removing her key from the
    profile + `up` replaces the gateway alone: the engine keeps its container, alice gets 401."""
    from tests.testbed_tests.conftest import cli

    write_profile, state = setup
    path = write_profile()
    doc = yaml.safe_load(path.read_text())
    doc["engine"].update(
        api_key={"env": "SPARKCTL_TEST_API_KEY"},
        api_keys={"alice": {"env": "SPARKCTL_ALICE_KEY", "per_minute": 3}},
        expose="private",
    )
    path.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("SPARKCTL_TEST_API_KEY", API_KEY)
    monkeypatch.setenv("SPARKCTL_ALICE_KEY", ALICE)
    try:
        res = cli(state, path, "up", "solo")
        assert res.returncode == 0, res.stdout + res.stderr
        base = f"http://{lab.node('spark1').mgmt_ip}:{ENGINE_PORT}"
        assert [_status(f"{base}/v1/models", ALICE) for _ in range(4)] == [200, 200, 200, 429]
        assert _status(f"{base}/sparkctl/gateway-metrics", ALICE) == 403  # the counts are the operator's
        st = cli(state, path, "status", "--json")
        assert st.returncode == 0 and ALICE not in st.stdout and API_KEY not in st.stdout
        [mode] = json.loads(st.stdout)["modes"]
        counts = {k["name"]: k for k in mode["keys"]}
        assert (counts["alice"]["requests"], counts["alice"]["ok"], counts["alice"]["limited"]) == (4, 3, 1)
        human = cli(state, path, "status").stdout
        assert "key alice: 4 requests (3 ok, 1 refused or failed, 1 over its limit)" in " ".join(
            human.split()
        )
        docker = lab.docker("spark1")
        (rank,) = [c for c in docker.containers.list() if c.labels.get("sparkctl.cluster") == doc["cluster"]
                   and c.labels.get("sparkctl.role", "engine") == "engine"]  # fmt: skip
        assert ALICE not in json.dumps(docker.containers.get(f"{rank.name}-gateway").attrs)
        del doc["engine"]["api_keys"]  # revoke alice
        path.write_text(yaml.safe_dump(doc))
        again = cli(state, path, "up", "solo", "--json")
        assert again.returncode == 0, again.stdout + again.stderr
        assert json.loads(again.stdout)["action"] == "gateway"
        assert docker.containers.get(rank.name).id == rank.id  # the engine kept its container and load
        assert _status(f"{base}/v1/models", ALICE) == 401 and _status(f"{base}/v1/models", API_KEY) == 200
    finally:
        cli(state, path, "down")
