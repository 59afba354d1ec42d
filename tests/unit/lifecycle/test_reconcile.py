"""Pure lifecycle steps: mode choice, reconcile decisions, container create requests, container parsing."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sparkctl.errors import UsageError
from sparkctl.lifecycle.reconcile import choose_mode, involved_nodes, reconcile
from sparkctl.planning.build import PlanFacts, build_plan
from sparkctl.profile import load_profile_file
from sparkctl.runtime.containers import create_params, info_from_attrs, parse_docker_time

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def dual():
    return load_profile_file(ROOT / "profiles" / "dual-spark.yaml")


def _facts(profile) -> PlanFacts:
    return PlanFacts(hcas={n.name: ["rocep1s0f1", "roceP2p1s0f1"] for n in profile.nodes})


def _attrs(spec, status="running", config_hash=None, exit_code=0, labels=None) -> dict:
    lab = dict(spec.labels if labels is None else labels)
    if config_hash:
        lab["sparkctl.config_hash"] = config_hash
    return {
        "Id": "c0ffee" * 10,
        "Name": "/" + spec.container_name,
        "Image": "sha256:" + "1" * 64,
        "State": {
            "Status": status,
            "ExitCode": exit_code,
            "OOMKilled": False,
            "StartedAt": "2025-01-31T12:00:00.123456789Z",
            "FinishedAt": "0001-01-01T00:00:00Z",
        },
        "Config": {"Image": spec.image, "Labels": lab},
    }


def _observed(specs) -> list:
    """What Docker lists for running `specs`: each one, and the gateway beside each that serves the API."""
    from sparkctl.planning.gateway_container import gateway_container

    both = [*specs, *(gateway_container(s) for s in specs if s.gateway is not None)]
    return [info_from_attrs(s.node, _attrs(s)) for s in both]


def _tp_mode(profile) -> str:
    return next(name for name, m in profile.modes.items() if len(m.nodes) == 2)


def _solo_mode(profile) -> str:
    return next(name for name, m in profile.modes.items() if len(m.nodes) == 1)


def test_choose_mode_by_tp_and_errors(dual):
    tp_mode = _tp_mode(dual)
    assert choose_mode(dual, None, 2) == tp_mode
    assert choose_mode(dual, None, None) == dual.default_mode()
    with pytest.raises(UsageError, match="no mode with tp=8"):
        choose_mode(dual, None, 8)
    with pytest.raises(UsageError, match="has tp=1, not --tp 2"):
        choose_mode(dual, _solo_mode(dual), 2)


def test_reconcile_up_to_date_only_when_every_rank_runs_the_plans_hash(dual):
    plan = build_plan(dual, _tp_mode(dual), _facts(dual))
    running = _observed(plan.ranks)
    assert reconcile(plan, running).up_to_date and reconcile(plan, running).gateways == []
    gateway = running[-1]
    assert gateway.role == "gateway" and gateway.name == plan.ranks[0].container_name + "-gateway"
    # The API's gateway gone, exited or changed (a revoked key): only it is replaced, not the ranks.
    dead = info_from_attrs(gateway.node, _attrs(replace_gateway_state(plan), "exited"))
    changed = info_from_attrs(gateway.node, _attrs(replace_gateway_state(plan), config_hash="0" * 12))
    for seen in (running[:-1], [*running[:-1], dead], [*running[:-1], changed]):
        rec = reconcile(plan, seen)
        assert (
            rec.up_to_date
            and rec.remove == []
            and [s.container_name for s in rec.gateways] == [plan.ranks[0].container_name]
        )

    one_dead = [
        running[0],
        info_from_attrs(plan.ranks[1].node, _attrs(plan.ranks[1], "exited", exit_code=1)),
        gateway,
    ]
    rec = reconcile(plan, one_dead)
    assert not rec.up_to_date and {c.name for c in rec.remove} == {s.container_name for s in plan.ranks}

    changed = [info_from_attrs(s.node, _attrs(s, config_hash="000000000000")) for s in plan.ranks]
    assert not reconcile(plan, changed).up_to_date

    assert not reconcile(plan, running[:1]).up_to_date  # rank 1 missing


def replace_gateway_state(plan):
    from sparkctl.planning.gateway_container import gateway_container

    return gateway_container(plan.ranks[0])


def test_reconcile_stops_the_other_mode(dual):
    tp_plan = build_plan(dual, _tp_mode(dual), _facts(dual))
    solo_plan = build_plan(dual, _solo_mode(dual), _facts(dual))
    old = [info_from_attrs(s.node, _attrs(s)) for s in tp_plan.ranks]
    rec = reconcile(solo_plan, old)
    assert not rec.up_to_date
    assert sorted(c.name for c in rec.remove) == sorted(s.container_name for s in tp_plan.ranks)
    # every node that holds a container plan.stop_first names is looked at
    assert set(involved_nodes(solo_plan)) == {n for m in dual.modes.values() for n in m.nodes}


def test_reconcile_keeps_a_healthy_mode_and_cleans_exited_leftovers(dual):
    tp_plan = build_plan(dual, _tp_mode(dual), _facts(dual))
    solo_plan = build_plan(dual, _solo_mode(dual), _facts(dual))
    mine = _observed(tp_plan.ranks)
    stale = info_from_attrs(solo_plan.ranks[0].node, _attrs(solo_plan.ranks[0], "exited"))
    rec = reconcile(tp_plan, [*mine, stale])
    assert rec.up_to_date and rec.remove == [] and [c.name for c in rec.leftovers] == [stale.name]
    running_other = info_from_attrs(solo_plan.ranks[0].node, _attrs(solo_plan.ranks[0]))
    assert not reconcile(tp_plan, [*mine, running_other]).up_to_date


def test_create_params_carry_the_plan_unchanged(dual, monkeypatch):
    plan = build_plan(dual, _tp_mode(dual), _facts(dual))
    spec = plan.rank(1)
    env = {k: str(v) for k, v in spec.env.items()}
    params = create_params(spec, env, ["/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"])
    # The whole argv replaces the image's ENTRYPOINT and CMD: what runs never depends on the image.
    assert [*params["entrypoint"], *params["command"]] == spec.argv and params["entrypoint"] == spec.argv[:1]
    assert params["name"] == spec.container_name
    assert params["environment"] == env and params["labels"] == spec.labels
    # Least privilege: the rdma preset's devices, IPC_LOCK and memlock, a private IPC namespace with
    # its /dev/shm size, and never --privileged.
    assert params["network_mode"] == "host" and params["ipc_mode"] == "private" and not params["privileged"]
    assert params["shm_size"] == spec.options.shm_size == "32g"
    assert params["devices"] == [
        "/dev/infiniband/uverbs0:/dev/infiniband/uverbs0:rwm",
        "/dev/infiniband/rdma_cm:/dev/infiniband/rdma_cm:rwm",
    ]
    assert params["cap_add"] == [*spec.options.cap_add] and params["cap_add"][0] == "IPC_LOCK"
    assert params["cap_drop"] == ["ALL"] and params["security_opt"] == ["no-new-privileges:true"]
    assert params["pids_limit"] == 8192
    assert [(u["Name"], u["Soft"], u["Hard"]) for u in params["ulimits"]] == [("memlock", -1, -1)]
    host_ipc = create_params(
        replace(spec, options=replace(spec.options, ipc_mode="host", shm_size=None)), env
    )
    assert host_ipc["ipc_mode"] == "host" and "shm_size" not in host_ipc
    assert [(m["Source"], m["Target"], m["ReadOnly"]) for m in params["mounts"]] == [
        (m.source, m.target, m.read_only) for m in spec.mounts
    ]
    [req] = params["device_requests"]
    assert spec.options.gpus == "all" and req["Capabilities"] == [["gpu"]] and req["Count"] == -1
    no_gpu = create_params(replace(spec, options=replace(spec.options, gpus=None)), env)
    assert "device_requests" not in no_gpu
    two = create_params(replace(spec, options=replace(spec.options, gpus="0,1")), env)
    assert two["device_requests"][0]["DeviceIDs"] == ["0", "1"]


def test_parse_docker_time_and_zero_time():
    assert parse_docker_time("0001-01-01T00:00:00Z") is None
    t = parse_docker_time("2025-01-31T12:00:00.123456789Z")
    assert t == datetime(2025, 1, 31, 12, 0, 0, 123456, tzinfo=UTC)
    assert parse_docker_time("2025-01-31T13:00:00+01:00") == datetime(2025, 1, 31, 12, tzinfo=UTC)


def test_container_info_from_inspect(dual):
    spec = build_plan(dual, _tp_mode(dual), _facts(dual)).rank(1)
    info = info_from_attrs("spark2", _attrs(spec, "exited", exit_code=137))
    assert (info.rank, info.mode, info.running, info.exit_code) == (1, _tp_mode(dual), False, 137)
    assert info.describe_exit() == "exit code 137" and info.uptime_s() is None


def test_settle_restarts_an_unhealthy_up_to_date_mode() -> None:
    from sparkctl.lifecycle.reconcile import Reconcile, settle

    observed = ["r0", "r1"]  # ContainerInfo stand-ins: settle only moves them around
    ok = Reconcile(True, [], ["old"])
    assert settle(ok, observed, healthy=True) is ok
    sick = settle(ok, observed, healthy=False)
    assert not sick.up_to_date and sick.remove == ["r0", "r1"] and sick.leftovers == []
    changed = Reconcile(False, ["x"], [])
    assert settle(changed, observed, healthy=False) is changed
