"""Least privilege and secrets on the real testbed (docs/security.md).

A started rank is inspected through its node's Docker engine: not privileged, the rdma preset's
devices/caps/ulimits, a private IPC namespace, no secret value in its env. Canaries for HF_TOKEN
and the API key never appear in any output, --json, log file line shown by `logs`, or `ps` on a
node; the API answers 401 without the key and 200 with it, and readiness works with it.
"""

from __future__ import annotations

import json
import os
import resource
import stat
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.testbed.profiles import ENGINE_PORT
from tests.testbed_tests.conftest import cli

pytestmark = pytest.mark.testbed
TOKEN = "hf_sparkctl_canary_token_0123456789"
API_KEY = "sk-sparkctl-canary-key-9876543210"
ADMIN_KEY = "sk-sparkctl-canary-admin-5555"


def _get_body(url: str, key: str | None, data: bytes | None = None) -> tuple[int, bytes]:
    """(status, body) of a GET (a POST with `data`), no proxy."""
    req = urllib.request.Request(url, data=data, headers={"Authorization": f"Bearer {key}"} if key else {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _post(url: str, key: str) -> int:
    return _get_body(url, key, data=b"{}")[0]


def _get(url: str, key: str | None) -> int:
    return _get_body(url, key)[0]


@pytest.fixture
def rdma_dir(tmp_path):
    """Stand-ins for /dev/infiniband: real character devices (the null device's numbers)."""
    where = tmp_path / "infiniband"
    where.mkdir()
    for name in ("uverbs0", "rdma_cm"):
        os.mknod(where / name, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    (where / "not-a-device").write_text("")  # only character devices are passed through
    return where


def test_least_privilege_and_secrets(lab, setup, monkeypatch, rdma_dir, tmp_path):
    write_profile, state = setup
    path = write_profile()
    doc = yaml.safe_load(path.read_text())
    # The admin key comes from a 0400 file on every node (read there, never by this shell).
    admin_file = Path(lab.node("spark1").node_root).parent / f"admin-key-{lab.id}"
    admin_file.write_text(ADMIN_KEY + "\n")
    admin_file.chmod(0o400)
    doc["engine"].update(
        secrets={"HF_TOKEN": {"env": "SPARKCTL_TEST_HF_TOKEN"}},
        api_key={"env": "SPARKCTL_TEST_API_KEY"},
        admin_api_key={"file": str(admin_file)},
        host="0.0.0.0",
        env={"STANDIN_LEAK_FILES": "/run/secrets/HF_TOKEN,/run/secrets/sparkctl-sglang.yaml"},
    )
    doc["engine"]["container"].update(preset="rdma", rdma_devices_dir=str(rdma_dir))
    # The preset asks memlock unlimited; a sandbox without CAP_SYS_RESOURCE cannot grant more than
    # its own hard limit, so there the profile's explicit ulimit (which wins over the preset) says so.
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    memlock = -1 if hard == resource.RLIM_INFINITY else hard
    if memlock != -1:
        doc["engine"]["container"]["ulimits"] = {"memlock": memlock}
    path.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("SPARKCTL_TEST_HF_TOKEN", TOKEN)
    monkeypatch.setenv("SPARKCTL_TEST_API_KEY", API_KEY)

    outputs = [cli(state, path, "plan", "tp2", "--json"), cli(state, path, "up", "tp2", "--json")]
    assert outputs[-1].returncode == 0, outputs[-1].stdout + outputs[-1].stderr  # readiness sent the key
    outputs += [cli(state, path, "status", "--json"), cli(state, path, "logs", "--tail", "200")]
    verify = cli(state, path, "verify", "--only", "ChatStream", "--json")  # with the profile's key
    assert verify.returncode == 0, verify.stdout + verify.stderr
    outputs.insert(-1, verify)  # `logs` stays last
    status = json.loads(outputs[2].stdout)
    assert status["modes"][0]["health"]["ready"], status  # status sends the key too
    plan = json.loads(outputs[0].stdout)
    assert plan["endpoint"]["api_key"].startswith("***") and "HF_TOKEN" not in plan["ranks"][0]["env"]

    cluster = doc["cluster"]
    secrets_dirs: list[tuple[str, str]] = []
    for rank, node in enumerate(("spark1", "spark2")):
        container = lab.docker(node).containers.get(f"sparkctl-{cluster}-tp2-r{rank}")
        host = container.attrs["HostConfig"]
        assert host["Privileged"] is False
        assert sorted(d["PathOnHost"] for d in host["Devices"]) == sorted(
            str(rdma_dir / n) for n in ("rdma_cm", "uverbs0")
        )
        assert host["CapAdd"] == ["IPC_LOCK"] and host["CapDrop"] == ["ALL"]  # the node user is root here
        assert host["SecurityOpt"] == ["no-new-privileges:true"] and host["PidsLimit"] == 8192
        assert [(u["Name"], u["Soft"], u["Hard"]) for u in host["Ulimits"]] == [("memlock", memlock, memlock)]
        assert host["IpcMode"] == "private" and host["ShmSize"] == 64 * 1024 * 1024
        env = container.attrs["Config"]["Env"]
        assert not any(TOKEN in e or API_KEY in e or ADMIN_KEY in e for e in env)
        assert "HF_TOKEN_PATH=/run/secrets/HF_TOKEN" in env and "HF_HUB_OFFLINE=1" in env
        assert not any(m["Destination"] == "/root/.cache/huggingface" for m in container.attrs["Mounts"])
        # The secret files are there, 0400, and hold the values.
        rc, out = container.exec_run(
            ["sh", "-c", "stat -c %a /run/secrets/HF_TOKEN; cat /run/secrets/HF_TOKEN"]
        )
        assert rc == 0 and out.decode().split() == ["400", TOKEN]
        rc, out = container.exec_run(["cat", "/run/secrets/sparkctl-sglang.yaml"])
        assert out.decode() == f'api-key: "{API_KEY}"\nadmin-api-key: "{ADMIN_KEY}"\n'
        # On the node's tmpfs, mounted read-only file by file: nothing in the writable layer.
        shm = {m["Destination"]: m for m in container.attrs["Mounts"] if m["Source"].startswith("/dev/shm/")}
        assert set(shm) == {"/run/secrets/HF_TOKEN", "/run/secrets/sparkctl-sglang.yaml"}
        assert all(m["RW"] is False for m in shm.values())
        upper = container.attrs["GraphDriver"]["Data"]["UpperDir"]  # the writable layer on the node's disk
        layer = lab.exec(node, ["sh", "-c", 'cat "$1"/run/secrets/* 2>/dev/null | wc -c', "x", upper])
        assert layer.stdout.strip() == "0"  # only Docker's empty mount points
        secrets_dirs.append((node, shm["/run/secrets/HF_TOKEN"]["Source"].rsplit("/", 1)[0]))
        # `ps` on the node: no value on any command line (the engine got --config PATH).
        ps = lab.exec(node, ["sh", "-c", "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '"]).stdout
        assert "--config /run/secrets/sparkctl-sglang.yaml" in ps
        assert TOKEN not in ps and API_KEY not in ps and ADMIN_KEY not in ps

    url = f"http://{lab.node('spark1').mgmt_ip}:{ENGINE_PORT}/v1/models"
    assert _get(url, None) == 401 and _get(url, "wrong") == 401 and _get(url, API_KEY) == 200

    for res in outputs:
        text = res.stdout + res.stderr
        assert TOKEN not in text and API_KEY not in text and ADMIN_KEY not in text
    # The engine printed both files; the rank log writer on the node masked every value (the
    # file-held admin key included, read on the node) before the line reached the file.
    raw = "".join(p.read_text() for p in Path(lab.node("spark1").node_root, "logs").iterdir())
    assert "STANDIN: /run/secrets/HF_TOKEN=***" in raw
    assert "STANDIN: /run/secrets/HF_TOKEN=***" in outputs[-1].stdout
    canaries = (TOKEN, API_KEY, ADMIN_KEY)
    for node in lab.nodes:  # grep of every log file on the nodes: no key, no token
        for p in Path(node.node_root, "logs").iterdir():
            assert not any(c in p.read_text() for c in canaries), p
    for p in state.rglob("*"):
        assert not p.is_file() or not any(c.encode() in p.read_bytes() for c in canaries), p
    assert 'admin-api-key: "***"' in outputs[-1].stdout
    logs_dir = Path(lab.node("spark1").node_root, "logs")
    assert stat.S_IMODE(logs_dir.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in logs_dir.iterdir()} == {0o600}
    assert cli(state, path, "down").returncode == 0
    for node, where in secrets_dirs:  # the secret files went with their containers
        assert lab.exec(node, ["test", "-e", where], check=False).returncode != 0, where
    admin_file.unlink()


def test_keyless_api_on_any_non_loopback_address_is_refused(lab, setup, tmp_path):
    write_profile, state = setup
    path = write_profile()
    doc = yaml.safe_load(path.read_text())
    doc["engine"]["expose"] = "private"  # the lab profile says public
    for host in ("0.0.0.0", "0", "::0", None):  # None: each node's own (LAN) address, still no key
        doc["engine"]["host"] = host
        path.write_text(yaml.safe_dump(doc))
        res = cli(state, path, "preflight", "solo", "--json")
        found = {f["check"]: f for f in json.loads(res.stdout)["findings"]}
        assert res.returncode == 1 and found["ApiExposure"]["severity"] == "error", host
        assert "engine.api_key" in found["ApiExposure"]["fix"]
    doc["engine"]["expose"] = "public"
    path.write_text(yaml.safe_dump(doc))
    found = {
        f["check"]: f for f in json.loads(cli(state, path, "preflight", "solo", "--json").stdout)["findings"]
    }
    assert found["ApiExposure"]["severity"] == "warn"


def test_secret_file_mode_is_enforced_with_a_fix(lab, setup, tmp_path):
    write_profile, state = setup
    path = write_profile()
    doc = yaml.safe_load(path.read_text())
    token = Path(lab.node("spark1").node_root).parent / f"hf-token-{lab.id}"
    token.write_text(TOKEN)
    token.chmod(0o644)
    doc["engine"]["secrets"] = {"HF_TOKEN": {"file": str(token)}}
    path.write_text(yaml.safe_dump(doc))
    try:
        res = cli(state, path, "preflight", "solo", "--json")
        found = [f for f in json.loads(res.stdout)["findings"] if f["check"] == "SecretFileMode"]
        assert res.returncode == 1 and found[0]["severity"] == "error"
        assert found[0]["fix"].startswith(f"chmod 0400 {token}")
        token.chmod(0o400)
        res = cli(state, path, "preflight", "solo", "--json")
        found = [f for f in json.loads(res.stdout)["findings"] if f["check"] == "SecretFileMode"]
        assert found and found[0]["severity"] == "ok"
        assert TOKEN not in res.stdout + res.stderr
    finally:
        token.unlink()


PRIVATE_SPELLINGS = [
    "/server_info",
    "/get_server_info",
    "/SERVER_INFO",
    "/server_info/",
    "//server_info",
    "/v1/../server_info",
    "/%73erver_info",
    "/%2573erver_info",
    "/x/get_server_info",
    "/server_info;a?b=c",
    "/v1/models/../../server_info",
]


def test_the_gateway_refuses_key_revealing_routes_from_outside_the_node(lab, setup, monkeypatch):
    """Issue 38 under `up`: the rank's gateway (HAProxy, its own least-privilege container) owns the
    API port; from the controller /server_info in every spelling is refused, the API answers with
    the key only, a stream arrives in pieces, the engine's own port is not reachable, the key is in
    no argv, env or `docker inspect`, and `down` leaves no gateway."""
    import http.client

    from sparkctl.planning.gateway import GATEWAY_IMAGE
    from sparkctl.secrets import bearer_sha256

    write_profile, state = setup
    path = write_profile(solo={"STANDIN_GEN_DELAY": "1.5"})  # a stream spread over ~1.5 s
    doc = yaml.safe_load(path.read_text())
    doc["engine"].update(api_key={"env": "SPARKCTL_TEST_API_KEY"}, expose="private")
    path.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("SPARKCTL_TEST_API_KEY", API_KEY)
    up = cli(state, path, "up", "solo", "--json")
    assert up.returncode == 0, up.stdout + up.stderr
    assert any(s["step"] == "gateway" for s in json.loads(up.stdout)["timeline"])
    ip = lab.node("spark1").mgmt_ip
    base = f"http://{ip}:{ENGINE_PORT}"
    for target in PRIVATE_SPELLINGS:
        for key in (API_KEY, None):
            status, raw = _get_body(base + target, key)
            assert status in (400, 404) and API_KEY.encode() not in raw, (target, status, raw)
        assert _post(base + target, API_KEY) in (400, 404), target
    probe = (
        "import sys, urllib.request as u; r = u.Request('http://127.0.0.1:20000/server_info', "
        "headers={'Authorization': 'Bearer ' + sys.argv[1]}); "
        "print(u.build_opener(u.ProxyHandler({})).open(r, timeout=10).read().decode())"
    )
    # the engine does answer its keys on its own port: the gateway is what keeps them on the node
    assert API_KEY in lab.exec("spark1", ["python3", "-c", probe, API_KEY]).stdout
    assert _get(f"{base}/v1/models", API_KEY) == 200 and _get(f"{base}/v1/models", None) == 401
    assert _get(f"{base}/v1/models", API_KEY + "x") == 401 and _get(f"{base}/health", None) == 200
    # /metrics needs the key, then is the engine's own answer (the stand-in serves none without its flag)
    inner = "import urllib.request as u, urllib.error as e\ntry: print(u.urlopen('http://127.0.0.1:20000/metrics', timeout=10).status)\nexcept e.HTTPError as x: print(x.code)"
    own = int(lab.exec("spark1", ["python3", "-c", inner]).stdout.strip())
    assert _get(f"{base}/metrics", None) == 401 and _get(f"{base}/metrics", API_KEY) == own
    # The engine itself listens on 127.0.0.1 of its node, API port - 10000: not from here.
    docker = lab.docker("spark1")
    rank = docker.containers.get(f"sparkctl-{doc['cluster']}-solo-r0")
    record = json.loads(rank.exec_run(["cat", "/tmp/standin-record.json"])[1])
    argv = record["argv"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == "20000"
    with pytest.raises(OSError):
        http.client.HTTPConnection(ip, ENGINE_PORT - 10000, timeout=5).connect()
    # A streamed completion arrives through the gateway piece by piece.
    conn = http.client.HTTPConnection(ip, ENGINE_PORT, timeout=60)
    body = {"model": "tiny-test", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers=headers)
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"
    assert resp.getheader("Server") is None
    pieces = list(iter(lambda: resp.read1(1 << 16), b""))
    assert len(pieces) >= 3 and b"[DONE]" in b"".join(pieces), pieces
    # The gateway: its own container beside the rank, least privilege, no key anywhere Docker shows.
    gate = docker.containers.get(f"{rank.name}-gateway")
    attrs = gate.attrs
    host = attrs["HostConfig"]
    assert gate.status == "running" and attrs["Config"]["Image"] == GATEWAY_IMAGE
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"] and not host["Privileged"]
    assert host["ReadonlyRootfs"] and "no-new-privileges:true" in host["SecurityOpt"]
    assert attrs["Config"]["Labels"]["sparkctl.role"] == "gateway"
    inspect = json.dumps(attrs)
    assert API_KEY not in inspect and bearer_sha256(API_KEY) not in inspect
    logs = gate.logs().decode()
    assert API_KEY not in logs and "/v1/chat/completions" in logs  # the access log: method, path, status
    assert cli(state, path, "down").returncode == 0
    assert not [c.name for c in docker.containers.list(all=True) if c.name.startswith(rank.name)]
