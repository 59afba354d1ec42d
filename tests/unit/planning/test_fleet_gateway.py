"""The fleet gateway's config as rendered, and run by the host's real haproxy on loopback in
front of stand-in service gateways (skipped where haproxy is not installed)."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkctl.planning import fleet_gateway as fg
from sparkctl.planning import gateway as gw
from sparkctl.secrets import SecretRef, render_files
from tests.unit.planning.fleet_live import KEY, OPERATOR_KEY, Fleet, StandIn, free_port, until, write_files

A = SecretRef(name="api-key-a", env="A")
B = SecretRef(name="api-key-b", env="B")
HAPROXY = pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy (Debian) not installed")


def route(service: str, port: int = 20000, on_demand: bool = False) -> fg.FleetRoute:
    return fg.FleetRoute(service, (f"{service}-model", service), (("127.0.0.1", port),), on_demand)


def spec(*routes: fg.FleetRoute, **kw: object) -> fg.FleetGatewaySpec:
    base: dict = {"keyed": True, "keys": (A, B), "operators": (A,)}
    return fg.FleetGatewaySpec(
        "spark1", "127.0.0.1", kw.pop("port", 30000), routes or (route("chat"),), **(base | kw)
    )


def test_routes_are_exact_targets_and_posts_go_by_model_through_the_map() -> None:
    cfg = fg.fleet_haproxy_config(spec(route("chat"), route("code", 20001, True)))
    assert "    acl route_post url -m str " + " ".join(fg.POST_ROUTES) in cfg
    assert "-m beg" not in cfg and "path_beg" not in cfg and "-m sub" not in cfg
    assert f"req.body,json_query('$.model'),map({fg.MODELS_MAP_PATH})" in cfg
    assert "    option http-buffer-request" in cfg and "    use_backend svc_%[var(txn.svc)]" in cfg
    files = fg.fleet_files(spec(route("chat"), route("code", 20001, True)))
    assert files[fg.MODELS_MAP_PATH].splitlines() == [
        "chat-model chat",
        "chat chat",
        "code-model code",
        "code code",
    ]


def test_each_service_is_one_checked_server_with_no_retry() -> None:
    cfg = fg.fleet_haproxy_config(spec(route("chat"), route("code", 20001)))
    code = cfg.split("backend svc_code", 1)[1]
    assert "    retries 0" in code and "    option httpchk GET /health" in code
    assert "server gateway0 127.0.0.1:20001 maxconn 1024 check inter 2s rise 1 fall 1" in code


def test_the_service_gateways_framing_and_key_checks_are_shared_not_copied() -> None:
    cfg = fg.fleet_haproxy_config(spec())
    for line in gw.framing_rules(fg.FLEET_BOUNDS):
        assert cfg.count(line) == 1
    assert f"deny_status 401 unless {gw.key_condition(gw.KEYS_PATH)}" in cfg
    assert f"deny_status 403 unless !is_state || {gw.key_condition(fg.OPERATORS_PATH)}" in cfg
    assert "deny_status 413 if { req.hdr_val(content-length) gt 1048576 }" in cfg
    assert "set-header Authorization" not in cfg  # forwarded unchanged


def test_keyless_fleets_check_no_key_and_no_operator_means_no_state() -> None:
    cfg = fg.fleet_haproxy_config(spec(keyed=False, keys=(), operators=()))
    assert "deny_status 401" not in cfg and "deny_status 403" not in cfg
    assert fg.fleet_key_files(spec(keyed=False, keys=(), operators=())) == []
    assert "    http-request deny deny_status 403 unless !is_state\n" in fg.fleet_haproxy_config(
        spec(operators=())
    )


def test_the_body_fits_the_buffer_and_a_wait_fits_the_client_timeout() -> None:
    cfg = fg.fleet_haproxy_config(spec(wait_s=600))
    b = fg.FLEET_BOUNDS
    assert f"tune.bufsize {b.max_header_bytes + b.max_body_bytes + fg.MAXREWRITE}" in cfg
    assert f"tune.maxrewrite {fg.MAXREWRITE}" in cfg and "    nbthread 1" in cfg
    assert "timeout client 630s" in cfg and f"lua-load {fg.LUA_PATH}" in cfg


def test_the_log_line_is_the_service_gateways() -> None:
    cfg = fg.fleet_haproxy_config(spec())
    assert f"log-format {gw.LOG_FORMAT}" in cfg and "capture" not in cfg and "httplog" not in cfg


def test_the_unknown_model_answer_lists_every_name_and_is_static() -> None:
    s = spec(route("chat"), route("code", 20001))
    body = json.loads(fg.fleet_files(s)[fg.UNKNOWN_PATH])["error"]
    assert body["code"] == "model_not_found" and body["type"] == "invalid_request_error"
    assert body["message"].endswith("this endpoint serves: chat-model, chat, code-model, code")
    assert "%[" not in fg.fleet_haproxy_config(s).split("status 404 content-type", 1)[1].split("\n")[0]


def test_key_files_hash_every_key_once_and_the_operators_apart() -> None:
    files = fg.fleet_key_files(spec(keys=(A, B, A)))
    assert [(f.target, f.ref, f.hashed) for f in files] == [
        (gw.KEYS_PATH, A, True),
        (gw.KEYS_PATH, B, True),
        (fg.OPERATORS_PATH, A, True),
    ]


@pytest.mark.parametrize(
    "bad",
    [
        lambda: fg.FleetRoute("Chat", ("c",), (("127.0.0.1", 1),)),
        lambda: fg.FleetRoute("chat", ('a"b',), (("127.0.0.1", 1),)),
        lambda: fg.FleetRoute("chat", (), (("127.0.0.1", 1),)),
        lambda: fg.FleetRoute("chat", ("c",), (("0.0.0.0", 1),)),
        lambda: spec(route("chat"), route("chat", 20001)),
        lambda: spec(route("chat"), fg.FleetRoute("code", ("chat",), (("127.0.0.1", 2),))),
        lambda: spec(keyed=True, keys=()),
        lambda: spec(keyed=False),
    ],
)
def test_bad_specs_are_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        bad()  # type: ignore[operator]


@HAPROXY
def test_haproxy_accepts_the_config(tmp_path: Path) -> None:
    config = write_files(tmp_path, spec(route("chat"), route("code", 20001, True)))
    out = subprocess.run(["haproxy", "-c", "-f", str(config)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.fixture
def stand_ins() -> Iterator[dict[str, StandIn]]:
    made = {name: StandIn(name) for name in ("chat", "code", "lazy", "cold")}
    made["chat"].start()
    made["code"].start()
    yield made
    for s in made.values():
        s.stop()


def live(tmp: Path, ins: dict[str, StandIn], wait_s: int = 60) -> Fleet:
    routes = (
        route("chat", ins["chat"].port),
        route("code", ins["code"].port),
        route("lazy", ins["lazy"].port, on_demand=True),
        route("cold", ins["cold"].port),
    )
    return Fleet(tmp, spec(*routes, port=free_port(), wait_s=wait_s, retry_after_s=7))


@pytest.fixture
def fleet(tmp_path: Path, stand_ins: dict[str, StandIn]) -> Iterator[Fleet]:
    f = live(tmp_path, stand_ins)
    until(lambda: not f.loaded("lazy") and not f.loaded("cold") and f.loaded("chat"))
    yield f
    f.close()


def served_by(answer: tuple[int, dict, bytes]) -> str:
    assert answer[0] == 200, answer
    return json.loads(answer[2])["served_by"]


@HAPROXY
def test_live_requests_go_to_their_models_service_with_the_header_unchanged(fleet: Fleet) -> None:
    for model, service in (
        ("chat-model", "chat"),
        ("code", "code"),
        ("code-model", "code"),
        ("chat", "chat"),
    ):
        answer = fleet.request("POST", "/v1/chat/completions", {"model": model, "messages": []})
        assert served_by(answer) == service
        assert json.loads(answer[2])["authorization"] == f"Bearer {KEY}"
    big = {"model": "code-model", "prompt": "x" * 900_000}  # the whole body is buffered to be routed
    assert served_by(fleet.request("POST", "/v1/completions", big)) == "code"
    assert fleet.request("POST", "/v1/completions", {"model": "code", "prompt": "x" * (1 << 20)})[0] == 413


@HAPROXY
def test_live_unknown_or_missing_models_get_the_list(fleet: Fleet) -> None:
    for body in ({"model": "gpt-4"}, {"messages": []}, b"not json", {"model": 3}):
        status, headers, raw = fleet.request("POST", "/v1/chat/completions", body)
        assert status == 404 and headers["content-type"] == "application/json"
        error = json.loads(raw)["error"]
        assert error["code"] == "model_not_found" and "chat-model, chat, code-model, code" in error["message"]
        assert "gpt-4" not in error["message"]


@HAPROXY
def test_live_keys_are_checked_and_other_targets_are_not_found(fleet: Fleet) -> None:
    body = {"model": "chat"}
    assert fleet.request("POST", "/v1/chat/completions", body, key=None)[0] == 401
    assert fleet.request("POST", "/v1/chat/completions", body, key="sk-wrong")[0] == 401
    assert fleet.request("POST", "/v1/chat/completions", body, key=OPERATOR_KEY)[0] == 200
    assert fleet.request("GET", "/health", key=None)[0] == 200
    assert fleet.request("GET", "/v1/models", key=None)[0] == 401
    assert fleet.request("GET", "/sparkctl/fleet-state", key=None)[0] == 401
    for method, path in (
        ("GET", "/metrics"),
        ("POST", "/v1/models"),
        ("GET", "/v1/models/"),
        ("GET", "/V1/models"),
    ):
        assert fleet.request(method, path)[0] == 404
    assert fleet.request("GET", "/sparkctl/fleet-state")[0] == 403  # a client key, not an operator's


@HAPROXY
def test_live_framing_tricks_are_refused(fleet: Fleet) -> None:
    auth = f"Authorization: Bearer {KEY}\r\n".encode()
    body = b'{"model":"chat"}'
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + auth
    for extra in (
        b"Transfer-Encoding: chunked\r\n",
        b"Content-Length: 16\r\nContent-Length: 17\r\n",  # equal ones HAProxy merges into one
        b"Connection: upgrade\r\nContent-Length: 16\r\n",
        b"Upgrade: websocket\r\nContent-Length: 16\r\n",
    ):
        assert b" 400 " in fleet.raw(head + extra + b"\r\n" + body) + b" "
    assert fleet.raw(head + b"Content-Length: 16\r\n\r\n" + body).endswith(b" 200 OK")


@HAPROXY
def test_live_models_lists_every_service_with_whether_it_is_loaded(fleet: Fleet, stand_ins: dict) -> None:
    def listed() -> dict[str, bool]:
        status, _, raw = fleet.request("GET", "/v1/models")
        doc = json.loads(raw)
        assert status == 200 and doc["object"] == "list"
        assert all(m["object"] == "model" and m["owned_by"] == "sparkctl" for m in doc["data"])
        assert [m["id"] for m in doc["data"]] == ["chat-model", "code-model", "lazy-model", "cold-model"]
        return {m["service"]: m["loaded"] for m in doc["data"]}

    assert listed() == {"chat": True, "code": True, "lazy": False, "cold": False}
    stand_ins["code"].stop()
    until(lambda: not listed()["code"])
    assert listed() == {"chat": True, "code": False, "lazy": False, "cold": False}


@HAPROXY
def test_live_a_stopped_service_not_on_demand_gets_503_with_retry_after(fleet: Fleet) -> None:
    status, headers, raw = fleet.request("POST", "/v1/chat/completions", {"model": "cold"})
    assert status == 503 and headers["retry-after"] == "7"
    assert json.loads(raw)["error"]["code"] == "model_not_loaded"
    assert fleet.state()["cold"]["waiting"] == 0 and fleet.state()["cold"]["requests"] == 1


@HAPROXY
def test_live_a_request_for_a_stopped_on_demand_service_waits_for_its_start(
    fleet: Fleet, stand_ins: dict
) -> None:
    before = fleet.state()["lazy"]
    assert before == {
        "loaded": False,
        "waiting": 0,
        "requests": 0,
        "last_request_age_s": None,
        "on_demand": True,
    }
    answers: list = []
    waiter = threading.Thread(
        target=lambda: answers.append(fleet.request("POST", "/v1/completions", {"model": "lazy-model"}))
    )
    waiter.start()
    until(lambda: fleet.state()["lazy"]["waiting"] >= 1)  # what the supervisor sees, then starts it
    assert not answers and fleet.state()["lazy"]["requests"] == 1
    assert fleet.state()["lazy"]["last_request_age_s"] >= 0
    stand_ins["lazy"].start()
    waiter.join()
    assert served_by(answers[0]) == "lazy"
    assert fleet.state()["lazy"]["waiting"] == 0 and fleet.state()["lazy"]["loaded"]


@HAPROXY
def test_live_an_on_demand_wait_ends_in_503_after_its_bound(tmp_path: Path, stand_ins: dict) -> None:
    f = live(tmp_path, stand_ins, wait_s=1)
    try:
        until(lambda: not f.loaded("lazy"))
        status, headers, _ = f.request("POST", "/v1/chat/completions", {"model": "lazy"})
        assert status == 503 and headers["retry-after"] == "7"
        lazy = f.state()["lazy"]
        assert (lazy["waiting"], lazy["requests"], lazy["loaded"]) == (0, 1, False)
    finally:
        f.close()


def test_the_secret_files_hold_hashes_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("A", "sk-a")
    monkeypatch.setenv("B", "sk-b")
    out = render_files(fg.fleet_key_files(spec()), None)
    assert set(out) == {gw.KEYS_PATH, fg.OPERATORS_PATH}
    assert (
        b"sk-a" not in out[gw.KEYS_PATH] and out[fg.OPERATORS_PATH] == (gw.key_hash("sk-a") + "\n").encode()
    )
