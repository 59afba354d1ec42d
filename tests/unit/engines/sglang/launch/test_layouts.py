"""Three boxes, a model with 4 KV heads: `fit` lists the layouts that work with their memory fit
and throughput shape instead of only refusing TP=3 (launch/layouts.py through the real CLI)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from sparkctl.cli import app
from sparkctl.engines.sglang.launch.layouts import candidates, propose_layouts
from sparkctl.engines.sglang.launch.model_meta import load_model_facts
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file

ROOT = Path(__file__).parents[5]
MODELS = ROOT / "tests" / "fixtures" / "models"
TRIO = ROOT / "profiles" / "trio-spark.yaml"
NODES = ["spark1", "spark2", "spark3"]


def models():
    return (
        load_model_facts(MODELS / "qwen3.6-27b-nvfp4", "Qwen/Qwen3.6-27B-NVFP4"),
        load_model_facts(MODELS / "qwen3.6-27b-dflash", "z-lab/Qwen3.6-27B-DFlash"),
    )


def test_candidates_of_three_boxes() -> None:
    names = [c[0] for c in candidates(NODES)]
    assert names == ["tp3", "pp3", "tp2+1solo", "tp2-idle", "dp3"]
    assert [c[0] for c in candidates(NODES[:2])] == ["tp2", "pp2", "dp2"]


def test_the_working_layouts_come_first_with_their_memory() -> None:
    target, draft = models()
    assert target.num_kv_heads == 4
    found = {
        o.name: o for o in propose_layouts(load_profile_file(TRIO), NODES, target, draft, build=build_plan)
    }
    assert (
        not found["tp3"].works and "4 KV heads do not split over tp=3" in found["tp3"].replicas[0].errors[0]
    )
    assert not found["pp3"].works and "pp_size == 1" in found["pp3"].replicas[0].errors[0]  # DFlash
    mixed = found["tp2+1solo"]
    assert mixed.works and mixed.mode is None
    tp2, solo = mixed.replicas
    assert (
        tp2.fits and solo.fits and abs(tp2.weights_gib * 2 - solo.weights_gib) < 0.02
    )  # weights split over TP=2
    assert found["tp2-idle"].idle == ["spark3"] and found["tp2-idle"].mode == {
        "nodes": ["spark1", "spark2"],
        "tp": 2,
    }
    assert found["dp3"].works and len(found["dp3"].replicas) == 3
    order = [
        o.works for o in propose_layouts(load_profile_file(TRIO), NODES, target, draft, build=build_plan)
    ]
    assert order == sorted(order, reverse=True)


def fit(*args: str):
    argv = ["fit", "tp3", "-p", str(TRIO), "--no-probe", "--no-parse-flags", *args]
    argv += [
        "--target-dir",
        str(MODELS / "qwen3.6-27b-nvfp4"),
        "--draft-dir",
        str(MODELS / "qwen3.6-27b-dflash"),
    ]
    return CliRunner().invoke(app, argv, env={"COLUMNS": "160"})


def test_fit_on_three_nodes_lists_layouts_json_and_text() -> None:
    res = fit("--json")
    assert res.exit_code == 1  # tp3 itself still fails
    layouts = {o["name"]: o for o in json.loads(res.stdout)["layouts"]}
    assert {n for n, o in layouts.items() if o["works"]} == {"tp2+1solo", "tp2-idle", "dp3"}
    assert layouts["dp3"]["replicas"][0]["fits"] is True and layouts["dp3"]["replicas"][0]["kv_tokens"] > 0
    text = fit().stdout
    assert "tp3 does not split over its nodes; layouts of the same boxes" in text
    assert "tp2-idle: modes: {tp2-idle: {nodes: [spark1, spark2], tp: 2}}" in text
    assert "tp2+1solo: needs unequal replicas (not one mode yet)" in text


def test_a_mode_that_splits_lists_no_layouts() -> None:
    argv = ["fit", "tp2", "-p", str(TRIO), "--no-probe", "--no-parse-flags", "--json"]
    argv += [
        "--target-dir",
        str(MODELS / "qwen3.6-27b-nvfp4"),
        "--draft-dir",
        str(MODELS / "qwen3.6-27b-dflash"),
    ]
    res = CliRunner().invoke(app, argv)
    assert json.loads(res.stdout)["layouts"] == []


def test_the_launch_pipeline_plan_check_runs_carries_the_layouts() -> None:
    from sparkctl.engines.sglang.launch.pipeline import check_plan
    from sparkctl.engines.support.models import ModelLookup

    profile = load_profile_file(TRIO)
    lookup = ModelLookup(*models())
    result = check_plan(
        build_plan(profile, "tp3"), profile, parse_flags=False, models=lookup, build=build_plan
    )
    assert {o.name for o in result.layouts if o.works} == {"tp2+1solo", "tp2-idle", "dp3"}
    ok = check_plan(build_plan(profile, "dp3"), profile, parse_flags=False, models=lookup, build=build_plan)
    assert ok.layouts == []
    assert check_plan(build_plan(profile, "tp3"), profile, parse_flags=False, models=lookup).layouts == []
