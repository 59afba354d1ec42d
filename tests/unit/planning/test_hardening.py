"""Who the engine runs as (engine.container.user) and its gateway, as planned (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sparkctl.errors import ProfileError
from sparkctl.planning.build import build_plan
from sparkctl.planning.gateway import gateway_spec
from sparkctl.planning.hardening import USER_HOME
from sparkctl.profile import load_profile_text

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))


def dual(kind: str = "sglang", **container: object) -> object:
    doc = yaml.safe_load((ROOT / "profiles" / "dual-spark.yaml").read_text())
    doc["engine"]["kind"] = kind
    if kind == "vllm":
        doc["engine"]["args"] = {}
        doc["engine"].pop("options", None)  # SGLang's own (its release)
        doc["model"].pop("draft", None)
    doc["engine"].setdefault("container", {}).update(container)
    return load_profile_text(yaml.safe_dump(doc), "p.yaml")


def test_sglang_stays_root_and_vllm_runs_as_the_node_user_by_default() -> None:
    sgl = build_plan(dual(), "solo").ranks[0]
    assert sgl.options.user == "root" and "user" not in sgl.options.describe()
    assert sgl.env["HF_HOME"] == "/root/.cache/huggingface" and "HOME" not in sgl.env
    assert sgl.options.cap_add == ["DAC_OVERRIDE"]  # root in the container, caches of user spark
    vllm = build_plan(dual("vllm"), "solo").ranks[0]
    assert vllm.options.user == "node" and "user node" in vllm.options.describe()
    assert {k: vllm.env[k] for k in USER_HOME} == USER_HOME  # HOME in /tmp, caches outside /root
    targets = {m.target for m in vllm.mounts}
    assert {"/var/cache/sparkctl/huggingface/hub", "/var/cache/sparkctl/triton"} <= targets
    assert vllm.options.cap_add == []  # the node user needs no capability for its own caches


@pytest.mark.parametrize(("user", "caps"), [("root", ["DAC_OVERRIDE"]), ("node", []), ("1000:1000", [])])
def test_an_explicit_user_wins_over_the_engines_default(user: str, caps: list[str]) -> None:
    for kind in ("sglang", "vllm"):
        opts = build_plan(dual(kind, user=user), "solo").ranks[0].options
        assert (opts.user, opts.cap_add) == (user, caps), kind


@pytest.mark.parametrize("user", ["spark", "-1:0", "0", "root:root", "1000:1000 --privileged"])
def test_a_user_is_root_node_or_numeric_uid_gid(user: str) -> None:
    with pytest.raises(ProfileError):
        dual(user=user)


@pytest.mark.parametrize("key", ["gateway", "front"])  # `front:` is the old name, still read
def test_the_gateway_is_only_for_a_groups_rank_0_and_only_when_on(key: str) -> None:
    prof = dual()
    assert gateway_spec(prof, "spark1", 0, "0.0.0.0", 8888, None).upstream_port == 18888
    assert gateway_spec(prof, "spark1", 1, "0.0.0.0", 8888, None) is None
    doc = yaml.safe_load((ROOT / "profiles" / "dual-spark.yaml").read_text())
    doc["engine"] |= {key: False}
    off = load_profile_text(yaml.safe_dump(doc), "p.yaml")
    assert gateway_spec(off, "spark1", 0, "0.0.0.0", 8888, None) is None
    plan = build_plan(off, "solo")
    argv = plan.ranks[0].argv
    assert plan.ranks[0].gateway is None and argv[argv.index("--port") + 1] == "8888"
    doc["engine"] |= {key: True, "internal_port": 9000}
    moved = build_plan(load_profile_text(yaml.safe_dump(doc), "p.yaml"), "solo").ranks[0]
    assert moved.gateway is not None and moved.gateway.upstream_port == 9000
    assert moved.argv[moved.argv.index("--port") + 1] == "9000"
