"""The lifecycle's pure decisions for modes with replicas: the router in reconcile, dry-run order,
rank naming in errors, one health over several replicas, and which endpoint verify/bench use."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sparkctl.lifecycle.reconcile import involved_nodes, reconcile, settle
from sparkctl.lifecycle.watch import combined, endpoints, rank_label
from sparkctl.planning.build import build_plan
from sparkctl.profile.load import load_profile_text
from sparkctl.runtime.containers import info_from_attrs
from sparkctl.runtime.readiness import EndpointHealth

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SPARKCTL_API_KEY", "sk-router-secret-value")


def quad(**router: object):
    doc = yaml.safe_load((ROOT / "profiles" / "quad-spark.yaml").read_text())
    doc["router"] = {**doc.get("router", {}), **router}
    doc["modes"]["solo3"] = {"nodes": ["spark3"], "tp": 1}
    return load_profile_text(yaml.safe_dump(doc), "quad.yaml")


def running(spec, status: str = "running", **labels: str):
    attrs = {
        "Id": "c0ffee" * 10,
        "Name": "/" + spec.container_name,
        "Image": "sha256:" + "1" * 64,
        "State": {
            "Status": status,
            "ExitCode": 0,
            "OOMKilled": False,
            "StartedAt": "2025-01-31T12:00:00Z",
            "FinishedAt": "0001-01-01T00:00:00Z",
        },
        "Config": {"Image": spec.image, "Labels": {**spec.labels, **labels}},
    }
    return info_from_attrs(spec.node, attrs)


def test_a_running_router_with_the_plans_config_is_kept_and_never_removed() -> None:
    plan = build_plan(quad(), "tp2x2")
    assert plan.router is not None
    ranks = [running(s) for s in plan.ranks]
    router = running(plan.router)
    assert router.role == "router" and router.rank is None and router.mode is None

    rec = reconcile(plan, [*ranks, router])
    assert rec.up_to_date and rec.router is router and rec.leftovers == [] and rec.remove == []

    # A replica's rank died: the ranks restart, the router stays (its endpoint never goes away).
    dead = [running(plan.ranks[0], "exited"), *ranks[1:]]
    rec = reconcile(plan, [*dead, router])
    assert not rec.up_to_date and rec.router is router
    assert router not in rec.remove and len(rec.remove) == len(plan.ranks)
    sick = settle(reconcile(plan, [*ranks, router]), [*ranks, router], healthy=False)
    assert not sick.up_to_date and sick.router is router and router not in sick.remove


def test_a_router_with_another_config_is_replaced_but_does_not_restart_the_ranks() -> None:
    plan = build_plan(quad(), "tp2x2")
    ranks = [running(s) for s in plan.ranks]
    old = running(plan.router, **{"sparkctl.config_hash": "000000000000"})
    rec = reconcile(plan, [*ranks, old])
    # Ranks as planned: up to date; `up` replaces the router alone (lifecycle/router.py bring_up).
    assert rec.up_to_date and rec.router is None and old not in rec.leftovers
    # Ranks restarting too: the stale router goes with them.
    rec = reconcile(plan, [running(plan.ranks[0], "exited"), *ranks[1:], old])
    assert not rec.up_to_date and old in rec.remove and rec.router is None


def test_a_single_replica_mode_removes_a_leftover_router() -> None:
    profile = quad()
    tp4 = build_plan(profile, "tp4")
    router_spec = build_plan(profile, "tp2x2").router
    assert tp4.router is None and router_spec is not None
    ranks = [running(s) for s in tp4.ranks]
    stray = running(router_spec)
    rec = reconcile(tp4, [*ranks, stray])
    assert rec.up_to_date and rec.leftovers == [stray]  # a stray router is no other mode serving
    rec = reconcile(tp4, [running(tp4.ranks[0], "exited"), *ranks[1:], stray])
    assert not rec.up_to_date and stray in rec.remove


def test_involved_nodes_hold_the_router_and_the_profiles_router_node() -> None:
    doc = yaml.safe_load((ROOT / "profiles" / "quad-spark.yaml").read_text())
    doc["modes"] = {
        "dp23": {"nodes": ["spark2", "spark3"], "tp": 1, "replicas": 2, "default": True},
        "solo3": {"nodes": ["spark3"], "tp": 1},
    }
    doc["router"]["node"] = "spark1"  # on no mode's nodes
    profile = load_profile_text(yaml.safe_dump(doc), "quad.yaml")
    dp23 = build_plan(profile, "dp23")
    assert dp23.router is not None and set(involved_nodes(dp23)) == {"spark1", "spark2", "spark3"}
    solo3 = build_plan(profile, "solo3")
    assert "spark1" not in involved_nodes(solo3)
    # the router dp23 left on spark1 is found (and removed) by `up solo3`
    assert set(involved_nodes(solo3, profile)) == {"spark1", "spark2", "spark3"}


def test_errors_name_the_replica_and_node_rank_of_a_rank() -> None:
    plan = build_plan(quad(), "tp2x2")
    assert [rank_label(s) for s in plan.ranks] == [
        "rank 0 (replica 0, node rank 0)",
        "rank 1 (replica 0, node rank 1)",
        "rank 2 (replica 1, node rank 0)",
        "rank 3 (replica 1, node rank 1)",
    ]
    sub = plan.replica(1)  # what a rolling switch starts: still named as replica 1's
    assert [rank_label(s) for s in sub.ranks] == [
        "rank 2 (replica 1, node rank 0)",
        "rank 3 (replica 1, node rank 1)",
    ]
    assert [rank_label(s) for s in build_plan(quad(), "tp4").ranks] == [f"rank {i}" for i in range(4)]


def test_up_waits_for_every_replicas_head_endpoint_not_the_router() -> None:
    plan = build_plan(quad(), "tp2x2")
    heads = [(e.host, e.port) for e in endpoints(plan)]
    assert heads == [(g.endpoint.host, g.endpoint.port) for g in plan.groups]
    assert (plan.endpoint.host, plan.endpoint.port) not in heads  # the router's comes after
    assert [e.port for e in endpoints(plan.replica(1))] == [plan.groups[1].endpoint.port]
    tp4 = build_plan(quad(), "tp4")
    assert endpoints(tp4) == [tp4.endpoint]


def test_one_health_over_replicas_is_ready_only_when_each_is() -> None:
    ok = EndpointHealth(True, ["m"], True, "ready")
    warming = EndpointHealth(True, ["m"], False, "/health: HTTP 503 (warming up)")
    assert combined([ok]) is ok
    both = combined([ok, ok])
    assert both.ready and both.detail == "ready"
    one = combined([ok, warming])
    assert not one.ready and one.detail == "replica 1: /health: HTTP 503 (warming up)"


def test_verify_and_bench_talk_to_the_router_when_the_mode_has_replicas() -> None:
    from sparkctl.lifecycle.endpoint import resolve_endpoint

    profile = quad()
    ep = resolve_endpoint(lambda: profile, "tp2x2", None, None)
    plan = build_plan(profile, "tp2x2")
    assert ep.url == plan.endpoint.url == f"http://127.0.0.1:{profile.engine.port}"
    assert ep.url not in {g.worker_url for g in plan.groups}
    assert ep.api_key == "sk-router-secret-value"
    single = resolve_endpoint(lambda: profile, "tp4", None, None)
    assert single.url == build_plan(profile, "tp4").groups[0].worker_url


def test_router_log_lines_are_labelled_and_plain_text() -> None:
    from sparkctl.lifecycle.logs import _spec_line

    plan = build_plan(quad(), "dp4")
    assert plan.router is not None
    raw = "2026-11-30T09:54:31.5Z \x1b[2m2026-11-30 09:54:31\x1b[0m \x1b[32m INFO\x1b[0m Starting router"
    line = _spec_line(plan.router, raw)
    assert line.prefix == "router@spark1" and line.text == "2026-11-30 09:54:31  INFO Starting router"
    assert line.ts is not None
    rank = _spec_line(plan.ranks[1], "2026-11-30T09:54:31.5Z \x1b[0mhi")
    assert rank.prefix == "rank1@spark2" and rank.text == "\x1b[0mhi"  # engines' lines untouched


def test_status_says_what_is_wrong_with_a_replica_and_the_fix() -> None:
    from sparkctl.lifecycle.status import ReplicaStatus

    plan = build_plan(quad(), "tp2x2")
    ok = EndpointHealth(True, ["m"], True, "ready")
    g = plan.groups[1]
    ranks = {n: running(plan.rank(n)) for n in g.ranks}

    def replica(health=ok, ranks=ranks, routed="healthy") -> ReplicaStatus:
        nodes = {n: plan.rank(n).node for n in g.ranks}
        return ReplicaStatus(g.index, g.head_node, g.worker_url, health, dict(ranks), routed, "tp2x2", nodes)

    assert replica().problem() is None and replica().state == "ready"
    assert replica(routed=None).state == "ready"  # no router view: nothing said about it

    shunned = replica(routed="unhealthy")
    assert shunned.state == "unhealthy"
    what, fix = shunned.problem()
    assert "router marks it unhealthy" in what and g.worker_url in fix and "sparkctl up tp2x2" in fix

    assert "not in its worker list" in replica(routed="not listed").problem()[0]

    exited = {**ranks, 3: running(plan.rank(3), "exited")}
    down = replica(EndpointHealth(detail="/v1/models: connection refused"), exited, "unhealthy")
    assert down.state == "down"
    what, fix = down.problem()
    assert what.startswith("rank 3 on spark4 is exited") and "sparkctl logs --rank 3" in fix
    gone = replica(ranks={2: ranks[2], 3: None})
    assert gone.problem()[0] == "rank 3 on spark4 is missing"
    js = down.to_json()
    assert (js["state"], js["router"], js["ranks"]) == ("down", "unhealthy", {"2": "running", "3": "exited"})


def test_the_supervisor_restarts_only_the_replica_whose_rank_died() -> None:
    from sparkctl.lifecycle.supervisor.supervise import failed_replica

    tp2x2 = build_plan(quad(), "tp2x2")
    assert failed_replica(tp2x2, {"cause": "x", "rank": tp2x2.groups[1].ranks[1]}) == 1
    assert failed_replica(tp2x2, {"cause": "x", "rank": tp2x2.groups[0].ranks[0]}) == 0
    # a failed canary speaks for every replica (it goes through the router): the whole plan
    assert failed_replica(tp2x2, {"cause": "generation canary failed 3 times"}) is None
    tp4 = build_plan(quad(), "tp4")  # one group: it restarts together, as before
    assert failed_replica(tp4, {"cause": "x", "rank": 3}) is None


def test_restart_events_name_the_replica() -> None:
    from sparkctl.lifecycle.state import describe_event

    cause = "rank 1 on spark2 exited (exit code 137)"
    one = describe_event({"event": "restarted", "cause": cause, "replica": 1, "ready_s": 2.5})
    assert one.endswith(f"replica 1 restarted because {cause}; serving again 2.5s later")
    going = describe_event({"event": "restarting", "cause": cause, "replica": 1, "attempt": 1, "delay_s": 0})
    assert "restarting replica 1 (the others serve meanwhile)" in going
    whole = describe_event({"event": "restarting", "cause": cause, "attempt": 1, "delay_s": 0})
    assert "restarting the whole group" in whole
