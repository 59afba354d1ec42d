"""Fabric report parsing and verdicts on the NCCL logs captured on two H200s, and the pure
orchestration steps (ranks, env, argv) on the shipped profiles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkctl.errors import UsageError
from sparkctl.findings import Severity
from sparkctl.gpu import fabric_worker
from sparkctl.gpu.fabric import fabric_ranks, rank_env, rendezvous_host, worker_argv
from sparkctl.gpu.fabric_report import build_report, known_causes, parse_rank_output
from sparkctl.planning.build import PlanFacts, build_plan
from sparkctl.profile.load import load_profile_file

ROOT = Path(__file__).resolve().parents[3]
H200 = ROOT / "tests" / "fixtures" / "gpu" / "h200"


def ranks(variant: str):
    return [
        parse_rank_output((H200 / f"fabric-{variant}-rank{r}.log").read_text(), r, f"node{r}") for r in (0, 1)
    ]


def test_h200_nvlink_run_parses_and_passes() -> None:
    rs = ranks("p2p")
    assert all(r.done and r.phase_reached == "done" for r in rs)
    assert rs[0].versions["nccl"] == "2.28.9" and rs[0].versions["torch"] == "2.11.0+cu130"
    # NCCL's own lines are kept apart from results: the transport it chose is in them.
    assert any("via P2P/IPC" in ln for ln in rs[0].nccl_lines)
    rep = build_report(rs, "nccl", threshold_gbps=21.875)
    assert len(rep.rows) == 8 and all(row["correct"] for row in rep.rows)
    big = {row["op"]: row for row in rep.rows if row["bytes"] == 1 << 30}
    assert big["all_reduce"]["busbw_gbps"] == pytest.approx(327.4, abs=0.1)
    assert big["all_gather"]["busbw_gbps"] == pytest.approx(264.9, abs=0.1)
    assert rep.judged_gbps == big["all_gather"]["busbw_gbps"]
    checks = {f.check: f for f in rep.findings}
    assert checks["FabricBandwidth"].severity is Severity.OK
    assert rs[0].transports == ["P2P/IPC"] and "over P2P/IPC" in checks["FabricBandwidth"].message
    # The lent machine's image ships an /etc/nccl.conf: exactly the stray file the report must flag.
    conf = [f for f in rep.findings if f.check == "NcclConf"]
    assert conf and all(f.severity is Severity.WARN for f in conf)
    assert "NCCL_NVLS_ENABLE=0" in conf[0].message
    assert rep.severity is Severity.WARN


def test_rows_take_the_slowest_rank() -> None:
    rs = ranks("p2p")
    per_rank = [{(x["op"], x["bytes"]): x["busbw_gbps"] for x in r.results} for r in rs]
    for row in build_report(rs, "nccl").rows:
        key = (row["op"], row["bytes"])
        assert row["busbw_gbps"] == min(per_rank[0][key], per_rank[1][key])


def test_h200_socket_only_run_is_below_the_spark_threshold() -> None:
    rep = build_report(ranks("socket"), "nccl", threshold_gbps=21.875)
    assert rep.judged_gbps is not None and rep.judged_gbps < 5
    bw = next(f for f in rep.findings if f.check == "FabricBandwidth")
    assert bw.severity is Severity.ERROR and "< threshold 21.875" in bw.message
    assert "over NET/Socket" in bw.message
    assert "fell back to TCP sockets" in (bw.fix or "") and "NCCL_IB_HCA" in (bw.fix or "")
    assert rep.severity is Severity.ERROR


def test_gloo_is_reported_not_judged() -> None:
    rep = build_report(ranks("socket"), "gloo", threshold_gbps=21.875)
    bw = next(f for f in rep.findings if f.check == "FabricBandwidth")
    assert bw.severity is Severity.OK and "not judged" in bw.message and rep.threshold_gbps is None


def _truncate_after(text: str, marker: str) -> str:
    lines = text.splitlines()
    idx = next(i for i, ln in enumerate(lines) if marker in ln)
    return "\n".join(lines[: idx + 1])


def test_hang_at_warmup_names_the_phase_causes_and_nccl_lines() -> None:
    full = (H200 / "fabric-socket-rank1.log").read_text()
    hung = parse_rank_output(
        _truncate_after(full, '"phase": "rendezvous"')
        + "\n"
        + "\n".join(ln for ln in full.splitlines() if "NCCL INFO" in ln)[:20000],
        1,
        "spark2",
    )
    hung.timed_out = True
    rep = build_report([ranks("socket")[0], hung], "nccl")
    (f,) = [f for f in rep.findings if f.check == "FabricRank"]
    assert (f.node, f.rank, f.severity) == ("spark2", 1, Severity.ERROR)
    assert "no progress past 'warmup'" in f.message and "hang" in f.message
    for cause in ("MTU", "NCCL_IB_HCA", "/etc/nccl.conf", "version drift"):
        assert cause in (f.fix or "")
    assert any("NET/Socket" in ln for ln in f.data["nccl"])
    assert not [x for x in rep.findings if x.check == "FabricBandwidth"]  # no verdict from a partial run


def test_version_drift_between_ranks_is_flagged() -> None:
    r0 = (H200 / "fabric-p2p-rank0.log").read_text()
    r1 = (H200 / "fabric-p2p-rank1.log").read_text().replace('"nccl": "2.28.9"', '"nccl": "2.27.3"')
    rep = build_report([parse_rank_output(r0, 0), parse_rank_output(r1, 1)], "nccl")
    drift = [f for f in rep.findings if f.check == "NcclDrift"]
    assert len(drift) == 1 and "rank0=2.28.9" in drift[0].message and "rank1=2.27.3" in drift[0].message


def test_worker_error_event_becomes_a_specific_cause() -> None:
    err = {
        "event": "error",
        "rank": 1,
        "phase": "rendezvous",
        "error": "RuntimeError: [enforce fail at gloo/transport/tcp/device.cc:84] ifa != nullptr. "
        "Unable to find address for: eth9",
    }
    out = parse_rank_output('{"event": "start", "rank": 1}\n' + json.dumps(err), 1, "spark2")
    (f,) = [f for f in build_report([out], "gloo").findings if f.check == "FabricRank"]
    assert "failed in 'rendezvous'" in f.message and "interface 'eth9'" in (f.fix or "")


def test_known_causes() -> None:
    assert known_causes(["NCCL WARN Bootstrap : no socket interface found"])[0].startswith(
        "NCCL_SOCKET_IFNAME"
    )
    assert (
        "NCCL_IB_HCA"
        in known_causes(["NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out"])[0]
    )
    assert known_causes(["all fine"]) == []


def test_worker_formulas_match_nccl_tests() -> None:
    assert fabric_worker.bus_factor("all_reduce", 2) == 1.0
    assert fabric_worker.bus_factor("all_gather", 2) == 0.5
    assert fabric_worker.bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert fabric_worker.parse_sizes("64K, 1M,1G") == [64 << 10, 1 << 20, 1 << 30]
    # The captured numbers obey them: all_gather busbw = algbw / 2 for two ranks.
    for r in ranks("p2p"):
        for res in r.results:
            factor = fabric_worker.bus_factor(res["op"], 2)
            assert res["busbw_gbps"] == pytest.approx(res["algbw_gbps"] * factor, abs=0.002)


def test_plan_ranks_env_and_argv_for_two_sparks() -> None:
    plan = build_plan(load_profile_file(ROOT / "profiles" / "dual-spark.yaml"), "tp2")
    rs = fabric_ranks(plan, "nccl")
    assert [(r.rank, r.node, r.gpu) for r in rs] == [(0, "spark1", 0), (1, "spark2", 0)]
    env = rank_env(rs[1].spec, "nccl")
    assert "HF_TOKEN" not in env  # secrets never reach the test containers
    assert env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["NCCL_DEBUG"] == "INFO"
    assert env["SGLANG_HOST_IP"] == rs[1].spec.env["SGLANG_HOST_IP"]
    host = rendezvous_host(plan)
    assert plan.dist_init_addr == f"{host}:50051"
    argv = worker_argv(rs[1], 2, f"{host}:41000", "nccl", "1M", 5, 60)
    assert (
        argv[argv.index("--rank") + 1] == "1" and argv[argv.index("--dist-init-addr") + 1] == f"{host}:41000"
    )


def test_one_box_two_gpus_gets_two_workers_on_localhost() -> None:
    plan = build_plan(load_profile_file(ROOT / "profiles" / "two-gpu-box.yaml"), "tp2")
    rs = fabric_ranks(plan, "nccl")
    assert [(r.rank, r.node, r.gpu) for r in rs] == [(0, "box", 0), (1, "box", 1)]
    assert rendezvous_host(plan) == "127.0.0.1"
    assert len({r.container_name for r in rs}) == 2


def test_unresolved_auto_hcas_refuse_nccl_but_not_gloo() -> None:
    import yaml

    data = yaml.safe_load((ROOT / "profiles" / "dual-spark.yaml").read_text())
    for node in data["nodes"]:
        node["fabric"]["hcas"] = "auto"
    from sparkctl.profile.load import load_profile_text

    plan = build_plan(load_profile_text(yaml.safe_dump(data)), "tp2", PlanFacts())
    spec = fabric_ranks(plan, "nccl")[0].spec
    with pytest.raises(UsageError, match="hcas"):
        rank_env(spec, "nccl")
    assert "NCCL_IB_HCA" not in rank_env(spec, "gloo")
