"""The gateway's spec and its HAProxy config, as planned (pure; `haproxy -c` when it is installed)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sparkctl.planning import gateway as gw
from sparkctl.secrets import SecretRef


def spec(**kw: object) -> gw.GatewaySpec:
    base: dict = {
        "node": "spark1",
        "listen": "10.0.0.1",
        "port": 30000,
        "upstream_host": "127.0.0.1",
        "upstream_port": 20000,
    }
    return gw.GatewaySpec(**(base | kw))


def frontend_lines(cfg: str) -> list[str]:
    return cfg.split("frontend api", 1)[1].split("backend engine", 1)[0].splitlines()


def test_listens_on_the_api_address_and_forwards_to_loopback() -> None:
    cfg = gw.haproxy_config(spec())
    assert "    bind 10.0.0.1:30000" in cfg
    assert "    server engine 127.0.0.1:20000 maxconn " in cfg
    assert "0.0.0.0" not in cfg


@pytest.mark.parametrize("host", ["0.0.0.0", "::", ""])
def test_an_unspecified_upstream_is_refused(host: str) -> None:
    with pytest.raises(ValueError, match="upstream"):
        spec(upstream_host=host)


def test_only_the_exact_openai_targets_are_allowed_per_method() -> None:
    lines = frontend_lines(gw.haproxy_config(spec()))
    post = next(ln for ln in lines if "acl route_post" in ln).split("-m str ", 1)[1].split()
    get = next(ln for ln in lines if "acl route_get" in ln).split("-m str ", 1)[1].split()
    assert post == ["/v1/chat/completions", "/v1/completions", "/v1/responses"]
    assert get == ["/v1/models"]
    deny = next(ln for ln in lines if "deny_status 404" in ln)
    assert deny.endswith("unless meth_get route_get || meth_post route_post || is_get is_health")
    assert not any("-m beg" in ln or "-m sub" in ln or "path_beg" in ln for ln in lines)  # exact only


def test_embeddings_only_where_served() -> None:
    assert ("POST", "/v1/embeddings") not in gw.routes_for(False)
    cfg = gw.haproxy_config(spec(routes=gw.routes_for(True)))
    assert "/v1/embeddings" in next(ln for ln in cfg.splitlines() if "acl route_post" in ln)


def test_health_reaches_the_engine_without_a_key_and_the_backend_is_never_probed() -> None:
    cfg = gw.haproxy_config(spec(keyed=True))
    lines = frontend_lines(cfg)
    assert "    acl is_health url -m str /health" in lines
    route = next(ln for ln in lines if "deny_status 404" in ln)
    key = next(ln for ln in lines if "deny_status 401" in ln)
    assert route.endswith("|| is_get is_health") and "unless is_get is_health ||" in key
    server = next(ln for ln in cfg.splitlines() if ln.strip().startswith("server engine"))
    assert "httpchk" not in cfg and " check" not in server  # no probe resets a starting engine
    assert "return status" not in cfg  # nothing is answered in the engine's place


def test_metrics_is_a_route_of_the_planned_gateway_and_needs_the_key() -> None:
    assert gw.METRICS not in gw.OPENAI_ROUTES and gw.HEALTH not in gw.OPENAI_ROUTES
    cfg = gw.haproxy_config(spec(keyed=True, routes=(*gw.OPENAI_ROUTES, gw.METRICS)))
    get = next(ln for ln in frontend_lines(cfg) if "acl route_get" in ln)
    assert get.split()[-2:] == ["/v1/models", "/metrics"]


def test_framing_tricks_are_refused_before_any_route() -> None:
    lines = frontend_lines(gw.haproxy_config(spec()))
    route = lines.index(next(ln for ln in lines if "deny_status 404" in ln))
    for needle in (
        "transfer-encoding) gt 0",
        "content-length) gt 1",
        "connection) gt 1",
        "close keep-alive",
        "upgrade) gt 0",
    ):
        at = next(i for i, ln in enumerate(lines) if needle in ln)
        assert at < route and "deny_status 400" in lines[at]


def test_keyed_compares_the_header_hash_against_the_key_file() -> None:
    cfg = gw.haproxy_config(spec(keyed=True))
    check = next(ln for ln in frontend_lines(cfg) if "deny_status 401" in ln)
    # one or two lines (sglang-router adds its own to the client's), the first and the last a key
    assert "{ req.hdr_cnt(authorization) ge 1 } { req.hdr_cnt(authorization) le 2 }" in check
    for occ in (1, -1):
        assert f"req.fhdr(authorization,{occ}),sha2(256),hex,lower -m str -f {gw.KEYS_PATH}" in check
    assert "deny_status 401" not in gw.haproxy_config(spec(keyed=False))


def test_the_key_file_holds_hashes_of_the_whole_header_value() -> None:
    text = gw.key_file_text(["k1", "k2"])
    assert text.splitlines() == [
        hashlib.sha256(b"Bearer k1").hexdigest(),
        hashlib.sha256(b"Bearer k2").hexdigest(),
    ]
    assert "k1" not in text


def test_the_log_line_holds_no_query_and_no_header() -> None:
    cfg = gw.haproxy_config(spec(keyed=True))
    assert f"log-format {gw.LOG_FORMAT}" in cfg and "httplog" not in cfg
    for field in ("%HU", "%r", "%HQ", "%hr", "%hrl", "%[req"):
        assert field not in gw.LOG_FORMAT
    assert "capture" not in cfg


def test_bounds_are_rendered() -> None:
    b = gw.Bounds(
        max_header_bytes=16384, max_body_bytes=1000, header_timeout_s=7, idle_timeout_s=9, max_connections=50
    )
    cfg = gw.haproxy_config(spec(bounds=b))
    for line in ("tune.bufsize 16384", "timeout http-request 7s", "timeout http-keep-alive 9s", "maxconn 50"):
        assert line in cfg
    assert "deny_status 413 if { req.hdr_val(content-length) gt 1000 }" in cfg


def test_upstream_connections_are_kept_alive_and_nothing_else_listens() -> None:
    cfg = gw.haproxy_config(spec())
    assert "http-reuse safe" in cfg and "option http-keep-alive" in cfg
    assert "stats" not in cfg and "socket" not in cfg
    assert cfg.count("bind ") == 1


def test_docker_args_are_least_privilege_and_hold_no_key() -> None:
    argv = gw.docker_run_args(
        spec(keyed=True), "sparkctl-c-solo-r0-gateway", "1000:1000", "/run/u/gw.cfg", "/run/u/keys"
    )
    joined = " ".join(argv)
    assert "--cap-drop ALL" in joined and "no-new-privileges:true" in joined
    assert "--user 1000:1000" in joined and "--read-only" in joined and "--privileged" not in joined
    assert f"/run/u/keys:{gw.KEYS_PATH}:ro" in argv and f"/run/u/gw.cfg:{gw.CONFIG_PATH}:ro" in argv
    assert argv[-4:] == [gw.GATEWAY_IMAGE, "haproxy", "-db", "-f", gw.CONFIG_PATH][-4:]
    assert gw.KEYS_PATH not in gw.docker_run_args(spec(), "n", "0:0", "/c", None)


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy (Debian) not installed")
def test_haproxy_accepts_the_config(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text(gw.key_file_text(["k"]))
    cfg = tmp_path / "h.cfg"
    cfg.write_text(gw.haproxy_config(spec(listen="127.0.0.1", keyed=True)).replace(gw.KEYS_PATH, str(keys)))
    out = subprocess.run(["haproxy", "-c", "-f", str(cfg)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_served_container_names_the_rank_a_gateway_serves() -> None:
    assert gw.served_container(gw.gateway_container_name("sparkctl-lab-solo-r0")) == "sparkctl-lab-solo-r0"
    assert gw.served_container("sparkctl-lab-solo-r0") is None
    assert gw.served_container("-gateway") is None


def test_a_replica_behind_the_router_answers_its_metadata_from_the_plan_after_the_key_check() -> None:
    answers = gw.router_answers("tiny-test", "org/it's-a-model", 2)
    assert [t for t, _ in answers] == ["/server_info", "/model_info"]
    server = json.loads(dict(answers)["/server_info"])
    assert server == {
        "served_model_name": "tiny-test",
        "model_path": "org/it's-a-model",
        "tp_size": 2,
        "dp_size": 1,
    }
    cfg = gw.haproxy_config(spec(keyed=True, answers=answers))
    lines = frontend_lines(cfg)
    returns = [i for i, ln in enumerate(lines) if "http-request return" in ln]
    key_check = next(i for i, ln in enumerate(lines) if "deny_status 401" in ln)
    assert len(returns) == 2 and min(returns) > key_check  # key holders only
    for i, n in zip(returns, (0, 1), strict=True):
        body, cond = lines[i].split("string '", 1)[1].split("' if ")
        assert "'" not in body and json.loads(body)["model_path"] == "org/it's-a-model"  # \u0027
        assert cond == f"is_get answer_{n}"
    assert "/server_info" not in gw.haproxy_config(spec(keyed=True))  # only behind a router


def test_named_keys_are_counted_per_backend_limited_and_their_counts_kept_for_the_operator() -> None:
    ref = SecretRef(name="api-key-alice", env="ALICE")
    named = (gw.NamedKey("alice", ref, 30), gw.NamedKey("ci", SecretRef(name="api-key-ci", env="CI")))
    cfg = gw.haproxy_config(spec(keyed=True, named=named), owner_uid=1000)
    lines = frontend_lines(cfg)
    key_check = next(i for i, ln in enumerate(lines) if "deny_status 401" in ln)
    naming = next(i for i, ln in enumerate(lines) if "set-var(txn.key)" in ln)
    assert naming > key_check and f"map({gw.NAMES_PATH})" in lines[naming]
    metrics = next(ln for ln in lines if "use-service prometheus-exporter" in ln)
    assert metrics.endswith("if is_get key_metrics")
    assert any(
        "deny_status 403 if is_get key_metrics !{ var(txn.key) -m str sparkctl }" in ln for ln in lines
    )
    assert any(f"set-header Authorization %[str(engine),map({gw.UPSTREAM_PATH})]" in ln for ln in lines)
    assert "    use_backend key_%[var(txn.key)] if { var(txn.key) -m found }" in lines
    backends = cfg.split("\nbackend ")[1:]
    names = [b.split("\n", 1)[0] for b in backends]
    assert names == ["engine", "key_sparkctl", "key_alice", "key_ci"]
    alice = next(b for b in backends if b.startswith("key_alice"))
    assert "deny_status 429 if { sc_http_req_rate(1) gt 30 }" in alice
    assert "sc_http_req_rate" not in next(b for b in backends if b.startswith("key_ci"))
    assert all(b.rstrip().endswith("disabled") for b in backends)  # each waits for the owner check
    assert "prometheus-exporter" not in gw.haproxy_config(spec(keyed=True))  # only with named keys
