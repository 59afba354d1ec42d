"""GatewayImage: judged per node that serves an API (pure parts; the testbed runs it for real)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sparkctl.facts.docker import ImageFacts
from sparkctl.planning.build import build_plan
from sparkctl.planning.gateway import GATEWAY_IMAGE
from sparkctl.preflight.checks.gateway import GatewayImage, check_gateway_image
from sparkctl.profile import load_profile_text

ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture(autouse=True)
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))


def _plan(mode: str, **engine: object):
    doc = yaml.safe_load((ROOT / "profiles" / "dual-spark.yaml").read_text())
    doc["engine"] |= engine
    return build_plan(load_profile_text(yaml.safe_dump(doc), "p.yaml"), mode)


def test_a_missing_gateway_image_is_an_error_naming_the_node_and_the_build() -> None:
    got = check_gateway_image("spark2", GATEWAY_IMAGE, None)
    assert got.severity == "error" and got.node == "spark2" and GATEWAY_IMAGE in got.message
    assert f"docker build -t {GATEWAY_IMAGE} images/gateway" in got.fix and "engine.gateway: false" in got.fix
    img = ImageFacts(ref=GATEWAY_IMAGE, id="sha256:" + "a" * 64, size=10, created="", layers=())
    ok = check_gateway_image("spark2", GATEWAY_IMAGE, img)
    assert ok.severity == "ok" and ok.data == {"id": img.id}


def test_it_applies_where_a_gateway_is_planned_and_probes_only_those_nodes() -> None:
    class Ctx:
        def __init__(self, plan) -> None:
            self.plan = plan

    dp2 = _plan("dp2")
    check = GatewayImage()
    assert check.applies(Ctx(dp2))
    heads = {r.node for r in dp2.ranks if r.gateway is not None} | {dp2.router.node}
    for node in {r.node for r in dp2.ranks}:
        wanted = {k for k in check.probes(Ctx(dp2), node) if k.startswith("image:")}
        assert wanted == ({f"image:{GATEWAY_IMAGE}"} if node in heads else set()), node
    assert not check.applies(Ctx(_plan("solo", gateway=False)))
