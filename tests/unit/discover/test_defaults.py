"""What `init` proposes where a question has no answer: model, draft, image, HF cache, revision."""

from __future__ import annotations

from sparkctl.discover.defaults import (
    DEFAULT_HF_CACHE,
    default_draft,
    default_image,
    default_model,
    hf_caches,
    pin_revision,
    split_ref,
)
from sparkctl.discover.facts import HfCache
from tests.unit.discover.test_proposal import C1, C2, listing, node


def test_defaults_for_the_questions() -> None:
    from sparkctl.discover.facts import EngineImage

    repos = {"Qwen/Qwen3.6-27B-NVFP4": listing(C1), "z-lab/Qwen3.6-27B-DFlash": listing(C2)}
    a = node(
        "local",
        "spark1",
        caches=[HfCache("/root/.cache/huggingface", "default", repos)],
        images=[EngineImage("sglang-dflash:spark", "sha256:x", 1), EngineImage("old:1", "sha256:y", 1)],
    )
    b = node(
        "spark2",
        "spark2",
        caches=[HfCache("/root/.cache/huggingface", "default", repos)],
        images=[EngineImage("sglang-dflash:spark", "sha256:x", 1)],
    )
    assert default_model([a, b]) == "Qwen/Qwen3.6-27B-NVFP4"
    assert default_draft([a, b], "Qwen/Qwen3.6-27B-NVFP4") == "z-lab/Qwen3.6-27B-DFlash"
    assert default_image([a, b]) == "sglang-dflash:spark"
    assert default_model([node("local", "x")]) is None


def test_split_ref_takes_the_revision_after_the_at() -> None:
    assert split_ref(" org/m@abc ") == ("org/m", "abc")
    assert split_ref("org/m") == ("org/m", None)


def test_hf_caches_follow_the_model_per_node_unless_given() -> None:
    a = node("h1", "n1", caches=[HfCache("/root/.cache/huggingface", "default", {"org/m": listing(C1)})])
    b = node("h2", "n2", caches=[HfCache("/data/hf", "given", {"org/m": listing(C1)})])
    assert hf_caches([a, b], "org/m", None) == (DEFAULT_HF_CACHE, {"h1": DEFAULT_HF_CACHE, "h2": "/data/hf"})
    assert hf_caches([a, b], "org/m", "/x") == ("/x", {"h1": "/x", "h2": "/x"})


def test_pin_revision_pins_refs_main_only_where_every_node_agrees() -> None:
    a = node("h1", "n1", caches=[HfCache("/c", "given", {"org/m": listing(C1)})])
    b = node("h2", "n2", caches=[HfCache("/c", "given", {"org/m": listing(C2)})])
    caches = {"h1": "/c", "h2": "/c"}
    assert pin_revision([a, a], "org/m", caches, None).value == C1
    assert pin_revision([a, b], "org/m", caches, None).value == "main"
    assert pin_revision([a, b], "org/m", caches, "v1").value == "v1"
