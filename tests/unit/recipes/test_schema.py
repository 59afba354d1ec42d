"""Image recipes without a node: the recipe format, MANIFEST.sha256, the shipped recipe."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import yaml

from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file
from sparkctl.recipes import RecipeError, find_recipe, load_recipe
from sparkctl.recipes import patch as patchlib
from sparkctl.recipes.build import check_patches
from sparkctl.recipes.images import BaseFile
from sparkctl.recipes.schema import check_manifest, parse_manifest

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "images" / "sglang-0.5.23-sleep-on-idle"
TARGET = "/sgl-workspace/sglang/python/sglang/srt/arg_groups/fields/device.py"
BASE_ID = "sha256:" + "ab" * 32


@pytest.fixture
def recipe_dir(tmp_path: Path) -> Path:
    dest = tmp_path / SHIPPED.name
    shutil.copytree(SHIPPED, dest)
    return dest


def edit(recipe_dir: Path, **changes: object) -> None:
    spec = yaml.safe_load((recipe_dir / "recipe.yaml").read_text())
    spec.update(changes)
    (recipe_dir / "recipe.yaml").write_text(yaml.safe_dump(spec))


def pristine_of(recipe) -> bytes:
    return patchlib.apply(recipe.contents[TARGET], recipe.patches[TARGET], reverse=True)


def test_shipped_recipe_is_consistent() -> None:
    recipe = load_recipe(find_recipe(SHIPPED.name))
    check_manifest(recipe)
    (f,) = recipe.spec.files
    assert f.target == TARGET and recipe.spec.engine_version == "0.5.23"
    pristine = pristine_of(recipe)
    assert hashlib.sha256(pristine).hexdigest() == f.base_sha256
    check_patches(recipe, {TARGET: BaseFile(pristine, 0o644)})  # base + patch == overlay
    # What it changes: the sleep_on_idle default, from False to on (env opt-out), nothing else.
    added = set(recipe.contents[TARGET].splitlines()) - set(pristine.splitlines())
    removed = set(pristine.splitlines()) - set(recipe.contents[TARGET].splitlines())
    assert removed == {b'    sleep_on_idle: A[bool, "Reduce CPU usage when sglang is idle."] = False'}
    assert b'        os.environ.get("SPARKCTL_SLEEP_ON_IDLE", "1") != "0"' in added
    assert recipe.tag == "sparkctl/sglang-0.5.23-sleep-on-idle:latest"


def _released_file(rel: str) -> tuple[bytes, str]:
    """The file as SGLang 0.5.23's wheel ships it: .ci/run installs that wheel (`pip install --no-deps
    sglang==0.5.23`); its RECORD holds the wheel's own sha256 of every file, checked here too."""
    import base64
    import importlib.metadata as md
    import os

    try:
        dist = md.distribution("sglang")
    except md.PackageNotFoundError:
        if os.environ.get("CI"):
            pytest.fail("sglang 0.5.23 is not installed; .ci/run installs it (--no-deps)")
        pytest.skip("sglang 0.5.23 not installed: pip install --no-deps sglang==0.5.23")
    assert dist.version == "0.5.23", dist.version
    (entry,) = [f for f in dist.files or [] if str(f) == rel]
    data = entry.read_binary()
    assert entry.hash is not None and entry.hash.mode == "sha256"
    digest = entry.hash.value
    recorded = base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()
    assert hashlib.sha256(data).hexdigest() == recorded  # the installed file is the wheel's bytes
    return data, recorded


def test_shipped_recipe_base_sha256_is_the_real_release_file() -> None:
    real, recorded = _released_file("sglang/srt/arg_groups/fields/device.py")
    recipe = load_recipe(SHIPPED)
    assert real == pristine_of(recipe)
    assert recorded == recipe.spec.files[0].base_sha256


def test_plan_maps_a_recipe_profile_to_the_recipe_tag(tmp_path: Path) -> None:
    spec = yaml.safe_load((ROOT / "profiles" / "solo-spark.yaml").read_text())
    spec["image"] = {"recipe": SHIPPED.name}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(spec))
    plan = build_plan(load_profile_file(tmp_path / "p.yaml"), None)
    assert plan.ranks[0].image == load_recipe(SHIPPED).tag
    assert plan.image_source == f"recipe:{SHIPPED.name}"


def test_tampered_overlay_names_the_file(recipe_dir: Path) -> None:
    (recipe_dir / "overlay" / "device.py").write_bytes(b"# changed\n")
    with pytest.raises(RecipeError, match=r"^overlay/device.py: sha256 .* does not match MANIFEST.sha256"):
        check_manifest(load_recipe(recipe_dir))


def test_manifest_must_cover_exactly_the_overlay_files(recipe_dir: Path) -> None:
    manifest = recipe_dir / "MANIFEST.sha256"
    line = manifest.read_text()
    manifest.write_text("# reviewed overlay files\n")
    with pytest.raises(RecipeError, match=r"overlay/device.py: no line in"):
        check_manifest(load_recipe(recipe_dir))
    manifest.write_text(line + "0" * 64 + "  overlay/other.py\n")
    with pytest.raises(RecipeError, match=r"lists overlay/other.py, which is not an overlay file"):
        check_manifest(load_recipe(recipe_dir))
    manifest.write_text("not a checksum\n")
    with pytest.raises(RecipeError, match=r"MANIFEST.sha256:1: not a sha256sum line"):
        load_recipe(recipe_dir)


def test_parse_manifest_accepts_sha256sum_output() -> None:
    text = f"{'a' * 64}  overlay/x.py\n{'b' * 64} *overlay/y.bin\n\n# comment\n"
    assert parse_manifest(text) == {"overlay/x.py": "a" * 64, "overlay/y.bin": "b" * 64}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"files": [{"source": "/etc/passwd", "target": TARGET}]}, "inside the recipe directory"),
        ({"files": [{"source": "overlay/device.py", "target": "relative/x.py"}]}, "absolute file path"),
        (
            {
                "files": [
                    {"source": "overlay/device.py", "target": TARGET, "patch": "patches/device.py.patch"}
                ]
            },
            "base_sha256",
        ),
        ({"labels": {"sparkctl.recipe.hash": "x"}}, "set by sparkctl"),
        ({"env": {"A": "x\ny"}}, "env.A"),
        ({"bogus": 1}, "unknown key 'bogus'"),
        ({"base": {"ref": "x", "id": "sha256:short"}}, "base.id"),
    ],
)
def test_invalid_recipes_are_refused(recipe_dir: Path, change: dict, message: str) -> None:
    edit(recipe_dir, **change)
    with pytest.raises(RecipeError, match=message):
        load_recipe(recipe_dir)


def test_unknown_recipe_lists_the_known_ones() -> None:
    with pytest.raises(RecipeError, match="recipe not found: nope") as exc:
        find_recipe("nope")
    assert SHIPPED.name in (exc.value.fix or "")


def test_content_hash_follows_what_reaches_the_image(recipe_dir: Path) -> None:
    first = load_recipe(recipe_dir).content_hash()
    edit(recipe_dir, description="reworded")
    assert load_recipe(recipe_dir).content_hash() == first
    edit(recipe_dir, env={"SPARKCTL_SLEEP_ON_IDLE": "0"})
    assert load_recipe(recipe_dir).content_hash() != first


def test_engine_version_loads_under_its_older_spelling_too(recipe_dir: Path) -> None:
    text = (recipe_dir / "recipe.yaml").read_text()
    (recipe_dir / "recipe.yaml").write_text(text.replace("engine_version:", "sglang_version:"))
    assert load_recipe(recipe_dir).spec.engine_version == "0.5.23"
