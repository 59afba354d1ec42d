"""The gateway as a container on a lab node (issue 38): the testbed's HAProxy image, started with
planning/gateway.py's own `docker run` argv (cap_drop ALL, no-new-privileges, read-only root) as a
node user that is not root, reading its 0400 key-hash file as that user; the engine behind it on
the node's 127.0.0.1 only. From the controller: keyed chat works, keyless is 401, the attack
corpus fails, no key in `docker inspect`, the engine's port is not reachable from outside.

Not yet `sparkctl up`: the lifecycle step that starts this container is not written (issue 38).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sparkctl.planning import gateway as gw
from tests.testbed import gateway_attacks as attacks
from tests.testbed.canary_engine import CANARY, read_log
from tests.testbed.gateway_image import haproxy_path, install_gateway_image

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [
    pytest.mark.testbed,
    pytest.mark.skipif(haproxy_path() is None, reason="needs haproxy on the host"),
]
ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-gateway-container-canary-2718"
NODE_UID = 1000  # the node user the profile names, not root
ENGINE_PORT, GATEWAY_PORT = 28111, 28112
ALLOWED = {(m, t) for m, t in gw.OPENAI_ROUTES} | {("GET", "/health")}


def _status(host: str, port: int, path: str, key: str | None) -> int:
    head = attacks._head("GET", path, key)
    try:
        codes = attacks.statuses(attacks.send(port, head, host=host))
    except OSError:
        return 0  # not listening (yet)
    return codes[0] if codes else 0


def _start(lab, node, workdir: Path, keys_owner: int, port: int = GATEWAY_PORT) -> str:
    spec = gw.GatewaySpec(
        node=node.name,
        listen=node.mgmt_ip,
        port=port,
        upstream_host="127.0.0.1",
        upstream_port=ENGINE_PORT,
        keyed=True,
    )
    cfg, keys = workdir / "haproxy.cfg", workdir / "keys.sha256"
    cfg.write_text(gw.haproxy_config(spec))
    cfg.chmod(0o444)
    keys.write_text(gw.key_file_text([KEY]))
    os.chown(keys, keys_owner, keys_owner)
    keys.chmod(0o400)
    name = gw.gateway_container_name(f"gwtest{keys_owner}")
    argv = gw.docker_run_args(spec, name, f"{NODE_UID}:{NODE_UID}", str(cfg), str(keys))
    subprocess.run(["docker", "-H", node.docker_host, "rm", "-f", name], capture_output=True)
    subprocess.run(["docker", "-H", node.docker_host, *argv], check=True, capture_output=True, text=True)
    return name


@pytest.fixture(scope="module")
def gateway(lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    node = lab.node("spark1")
    install_gateway_image(lab, node)
    workdir = tmp_path_factory.mktemp("gwc")
    workdir.chmod(0o755)
    log = str(workdir / "engine.log")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}"}
    engine = subprocess.Popen(
        [
            "nsenter",
            f"--net={node.netns_path}",
            "--",
            sys.executable,
            "-m",
            "tests.testbed.canary_engine",
            str(ENGINE_PORT),
            log,
        ],
        cwd=ROOT,
        env=env,
    )
    name = _start(lab, node, workdir, NODE_UID)
    try:
        for _ in range(150):
            if _status(node.mgmt_ip, GATEWAY_PORT, "/health", None) == 200:
                break
            time.sleep(0.1)
        else:
            logs = subprocess.run(
                ["docker", "-H", node.docker_host, "logs", name], capture_output=True, text=True
            )
            pytest.fail(f"the gateway never answered /health 200: {logs.stdout[-800:]} {logs.stderr[-800:]}")
        yield node, name, log, workdir
    finally:
        subprocess.run(["docker", "-H", node.docker_host, "rm", "-f", name], capture_output=True)
        engine.terminate()
        engine.wait(10)


def test_keyed_chat_through_the_container_and_keyless_refused(gateway) -> None:
    node, _, log, _ = gateway
    assert _status(node.mgmt_ip, GATEWAY_PORT, "/health", None) == 200
    assert _status(node.mgmt_ip, GATEWAY_PORT, "/v1/models", None) == 401
    assert _status(node.mgmt_ip, GATEWAY_PORT, "/v1/models", KEY) == 200
    chat = attacks._head("POST", "/v1/chat/completions", KEY, body=b'{"model":"fake","messages":[]}')
    answer = attacks.send(GATEWAY_PORT, chat, host=node.mgmt_ip)
    assert attacks.statuses(answer) == [200] and b"chat.completion" in answer
    assert ["POST", "/v1/chat/completions", f"Bearer {KEY}"] in [list(s) for s in read_log(log)]


def test_the_container_is_least_privilege_and_holds_no_key(gateway) -> None:
    node, name, _, _ = gateway
    out = subprocess.run(
        ["docker", "-H", node.docker_host, "inspect", name], capture_output=True, text=True, check=True
    ).stdout
    assert KEY not in out and gw.key_hash(KEY) not in out
    info = json.loads(out)[0]
    host = info["HostConfig"]
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"] and not host["Privileged"]
    assert "no-new-privileges:true" in host["SecurityOpt"] and host["ReadonlyRootfs"]
    assert info["Config"]["User"] == f"{NODE_UID}:{NODE_UID}"
    assert info["State"]["Running"]


def test_the_engine_is_not_reachable_from_outside_its_node(gateway) -> None:
    node, *_ = gateway
    with socket.socket() as s:
        s.settimeout(2)
        assert s.connect_ex((node.mgmt_ip, ENGINE_PORT)) != 0


def test_the_attack_corpus_fails_against_the_container(gateway) -> None:
    node, name, log, _ = gateway
    corpus = attacks.path_attacks(KEY)[::7] + attacks.framing_attacks(KEY) + attacks.method_attacks(KEY)
    secrets = attacks.canaries([KEY, CANARY])
    leaks = []
    for name, data in corpus:
        answer = attacks.send(GATEWAY_PORT, data, host=node.mgmt_ip)
        leaks += [(name, s) for s in secrets if s in answer]
    time.sleep(0.2)
    reached = [s for s in read_log(log) if (s[0], s[1]) not in ALLOWED]
    assert leaks == [] and reached == []
    logs = subprocess.run(["docker", "-H", node.docker_host, "logs", name], capture_output=True, text=True)
    seen = logs.stdout + logs.stderr
    assert "/v1/models" in seen  # it logs requests...
    assert KEY not in seen and attacks.canaries([KEY])[1].decode() not in seen  # ...never the key


def test_a_key_file_the_node_user_cannot_read_stops_the_gateway(lab, gateway) -> None:
    """The router's bug (issue 38): a 0400 secret owned by another user. The gateway must fail
    loudly (exit), not serve without its key check."""
    node, _, _, workdir = gateway
    other = workdir / "root-owned"
    other.mkdir()
    other.chmod(0o755)
    name = _start(lab, node, other, 0, GATEWAY_PORT + 1)
    try:
        for _ in range(50):
            state = subprocess.run(
                [
                    "docker",
                    "-H",
                    node.docker_host,
                    "inspect",
                    "-f",
                    "{{.State.Running}} {{.State.ExitCode}}",
                    name,
                ],
                capture_output=True,
                text=True,
            ).stdout.split()
            if state and state[0] == "false":
                break
            time.sleep(0.1)
        assert state[0] == "false" and state[1] != "0"
        logs = subprocess.run(
            ["docker", "-H", node.docker_host, "logs", name], capture_output=True, text=True
        )
        assert "keys.sha256" in logs.stdout + logs.stderr
    finally:
        subprocess.run(["docker", "-H", node.docker_host, "rm", "-f", name], capture_output=True)
