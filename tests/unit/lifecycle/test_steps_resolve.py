"""`up` resolves fabric.hcas and fabric.gid_index 'auto' from each node's RoCE sysfs before starting."""

from __future__ import annotations

from pathlib import Path

import yaml

from sparkctl.connectors.local import LocalConnector
from sparkctl.facts import rdma
from sparkctl.lifecycle.steps import resolve_plan
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_text
from tests.fixtures.sysfs import layouts

ROOT = Path(__file__).parents[3]


class Pool:
    def get(self, node: str):
        return node


def test_gid_index_auto_is_read_per_node(tmp_path, monkeypatch) -> None:
    sc = layouts.ring4(v6_first={"spark3"})
    dirs = layouts.write(sc, tmp_path)
    real = rdma.probe_rdma
    monkeypatch.setattr(rdma, "probe_rdma", lambda node: real(LocalConnector(node), str(dirs[node] / "sys")))
    doc = yaml.safe_load((ROOT / "profiles" / "quad-spark.yaml").read_text())
    for n in doc["nodes"]:
        _, _, ips = layouts.node_texts(sc, n["name"])
        n["fabric"] = {
            "netdevs": sorted(ips),
            "ip": sorted(ips.values())[0],
            "hcas": "auto",
            "gid_index": "auto",
        }
    profile = load_profile_text(yaml.safe_dump(doc))
    plan = build_plan(profile, "tp4")
    assert any("gid_index is 'auto'" in u for u in plan.unresolved)
    resolved = resolve_plan(profile, plan, Pool())
    gids = {r.node: r.env["NCCL_IB_GID_INDEX"] for r in resolved.ranks}
    assert gids == {"spark1": "3", "spark2": "3", "spark3": "5", "spark4": "3"}
    assert (
        resolved.ranks[0].env["NCCL_IB_HCA"] == "roceP2p1s0f0,roceP2p1s0f1,rocep1s0f0,rocep1s0f1"
    )  # both halves of both cages
