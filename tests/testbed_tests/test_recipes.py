"""Image recipes on real Docker engines (testbed): build, one small layer, refusals, reproducibility.

The real base (lmsysorg/sglang, ~57 GB) cannot be pulled here, so the stand-in base is the
stand-in engine plus the pristine SGLang 0.5.23 file at its real path. The pristine bytes are
the shipped overlay with its patch reversed; test_recipes_schema checks they hash to the
recipe's base_sha256 (and equal the 0.5.23 wheel's file where the wheel is available).
"""

from __future__ import annotations

import hashlib
import io
import shutil
import tarfile
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sparkctl.cli import app
from sparkctl.recipes import load_recipe
from sparkctl.recipes import patch as patchlib
from tests.testbed.images import ENGINE_TAG
from tests.testbed.profiles import write_lab_profile

pytestmark = pytest.mark.testbed

SHIPPED = Path(__file__).resolve().parents[2] / "images" / "sglang-0.5.23-sleep-on-idle"
STANDIN_BASE = "sparkctl-test/sglang-base:0.5.23"


def _context(files: dict[str, bytes]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def _image_build(client, dockerfile: str, files: dict[str, bytes], tag: str) -> str:
    ctx = _context({"Dockerfile": dockerfile.encode(), **files})
    image, _ = client.images.build(fileobj=ctx, custom_context=True, tag=tag, rm=True, forcerm=True)
    return image.id


@pytest.fixture(scope="module")
def standin_base(lab) -> str:
    """The stand-in engine + pristine device.py at the real base's path, on every lab node."""
    shipped = load_recipe(SHIPPED)
    (f,) = shipped.spec.files
    pristine = patchlib.apply(shipped.contents[f.target], shipped.patches[f.target], reverse=True)
    assert hashlib.sha256(pristine).hexdigest() == f.base_sha256
    dockerfile = f"FROM {ENGINE_TAG}\nCOPY device.py {f.target}\n"
    image_id = _image_build(lab.docker("spark1"), dockerfile, {"device.py": pristine}, STANDIN_BASE)
    for node in lab.nodes[1:]:
        lab.load_image(node, STANDIN_BASE, from_node="spark1")
    return image_id


def _pinned_copy(tmp_path: Path, base_id: str | None, ref: str = STANDIN_BASE) -> Path:
    """The shipped recipe, re-pinned to a base that exists here (everything else unchanged)."""
    dest = tmp_path / SHIPPED.name
    shutil.copytree(SHIPPED, dest)
    spec = yaml.safe_load((dest / "recipe.yaml").read_text())
    spec["base"] = {"ref": ref, **({"id": base_id} if base_id else {})}
    (dest / "recipe.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return dest


@pytest.fixture
def profile(lab, tmp_path: Path) -> Path:
    return write_lab_profile(lab, tmp_path / "lab.yaml")


def _cli(*args: str):
    result = CliRunner().invoke(app, list(args))
    text = result.output + (result.stderr if result.stderr_bytes is not None else "")
    return result, " ".join(text.split())  # rich wraps at the terminal width


def test_build_adds_one_small_layer_and_verifies(lab, standin_base, tmp_path, profile) -> None:
    recipe_dir = _pinned_copy(tmp_path, standin_base)
    recipe = load_recipe(recipe_dir)
    tag = "sparkctl-test/recipe-a:1"
    result, out = _cli(
        "image", "build", str(recipe_dir), "--tag", tag, "--node", "spark1", "-p", str(profile)
    )
    assert result.exit_code == 0, out
    assert "+1 layer" in out

    client = lab.docker("spark1")
    base, derived = client.images.get(standin_base), client.images.get(tag)
    base_layers, layers = base.attrs["RootFS"]["Layers"], derived.attrs["RootFS"]["Layers"]
    assert layers[:-1] == base_layers and len(layers) == len(base_layers) + 1
    added = derived.attrs["Size"] - base.attrs["Size"]
    assert 0 < added < 64 * 1024, added  # one ~4 KB file, not a copy of the base
    assert derived.labels["sparkctl.recipe.hash"] == recipe.content_hash()
    assert derived.labels["sparkctl.recipe.base"] == standin_base
    assert derived.labels["org.opencontainers.image.description"].startswith("SGLang 0.5.23")

    # The file in the image is the reviewed overlay, with the base file's mode.
    (f,) = recipe.spec.files
    cid = client.containers.create(tag, entrypoint=["/x"], command=[])
    try:
        stream, _ = cid.get_archive(f.target)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.next()
            assert tar.extractfile(member).read() == recipe.contents[f.target]
            assert member.mode & 0o777 == 0o644
    finally:
        cid.remove(force=True)

    result, out = _cli(
        "image", "verify", str(recipe_dir), "--tag", tag, "--node", "spark1", "-p", str(profile)
    )
    assert result.exit_code == 0, out
    assert "matches overlay/device.py" in out


def test_build_is_reproducible(lab, standin_base, tmp_path, profile) -> None:
    recipe_dir = _pinned_copy(tmp_path, standin_base)
    labels, overlay_layers = [], []
    for node, tag in (
        ("spark1", "sparkctl-test/recipe-r:1"),
        ("spark1", "sparkctl-test/recipe-r:2"),
        ("spark2", "sparkctl-test/recipe-r:1"),
    ):
        result, out = _cli(
            "image", "build", str(recipe_dir), "--tag", tag, "--node", node, "-p", str(profile)
        )
        assert result.exit_code == 0, out
        image = lab.docker(node).images.get(tag)
        labels.append(image.labels["sparkctl.recipe.hash"])
        overlay_layers.append(image.attrs["RootFS"]["Layers"][-1])
    assert len(set(labels)) == 1, labels
    assert labels[0] == load_recipe(recipe_dir).content_hash()
    # Same engine: the byte-identical context hits the build cache, so the very same layer. (Another
    # engine's layer differs only in parent-directory mtimes, which Docker sets at build time.)
    assert overlay_layers[0] == overlay_layers[1]


def test_tampered_overlay_is_refused_naming_the_file(lab, standin_base, tmp_path, profile) -> None:
    recipe_dir = _pinned_copy(tmp_path, standin_base)
    overlay = recipe_dir / "overlay" / "device.py"
    overlay.write_bytes(overlay.read_bytes().replace(b'"1") != "0"', b'"1") != "1"'))
    tag = "sparkctl-test/recipe-tampered:1"
    result, out = _cli(
        "image", "build", str(recipe_dir), "--tag", tag, "--node", "spark1", "-p", str(profile)
    )
    assert result.exit_code == 2, out
    assert "overlay/device.py" in out and "MANIFEST.sha256" in out
    assert not lab.docker("spark1").images.list(name=tag)

    # Re-registering the tampered file in the manifest is not enough: it is no longer base + patch.
    digest = hashlib.sha256(overlay.read_bytes()).hexdigest()
    (recipe_dir / "MANIFEST.sha256").write_text(f"{digest}  overlay/device.py\n")
    result, out = _cli(
        "image", "build", str(recipe_dir), "--tag", tag, "--node", "spark1", "-p", str(profile)
    )
    assert result.exit_code == 2, out
    assert "overlay/device.py: is not the base's" in out and "patches/device.py.patch" in out
    assert not lab.docker("spark1").images.list(name=tag)


def test_wrong_base_id_is_refused(lab, standin_base, tmp_path, profile) -> None:
    wrong = "sha256:" + "0" * 64
    recipe_dir = _pinned_copy(tmp_path, wrong)
    result, out = _cli("image", "build", str(recipe_dir), "--node", "spark1", "-p", str(profile))
    assert result.exit_code == 2, out
    assert "recipe.yaml" in out and wrong in out and standin_base in out  # names what the ref really is

    # A base that exists but is not the one the patch was written for (no SGLang file at all).
    engine_id = lab.docker("spark1").images.get(ENGINE_TAG).id
    recipe_dir = _pinned_copy(tmp_path / "other", engine_id, ref=ENGINE_TAG)
    result, out = _cli("image", "build", str(recipe_dir), "--node", "spark1", "-p", str(profile))
    assert result.exit_code == 2, out
    assert "patches/device.py.patch" in out and "not in the base image" in out


def test_unpinned_base_is_refused_with_the_id_to_pin(lab, standin_base, tmp_path, profile) -> None:
    recipe_dir = _pinned_copy(tmp_path, None)
    result, out = _cli("image", "build", str(recipe_dir), "--node", "spark1", "-p", str(profile))
    assert result.exit_code == 2, out
    assert "not pinned" in out and standin_base in out


def test_verify_finds_a_changed_file_in_the_image(lab, standin_base, tmp_path, profile) -> None:
    recipe_dir = _pinned_copy(tmp_path, standin_base)
    recipe = load_recipe(recipe_dir)
    tag = "sparkctl-test/recipe-v:1"
    result, out = _cli(
        "image", "build", str(recipe_dir), "--tag", tag, "--node", "spark1", "-p", str(profile)
    )
    assert result.exit_code == 0, out
    (f,) = recipe.spec.files
    # Someone edits the file inside the image after the build (same labels, one more layer).
    _image_build(
        lab.docker("spark1"), f"FROM {tag}\nCOPY device.py {f.target}\n", {"device.py": b"# edited\n"}, tag
    )
    result, out = _cli(
        "image", "verify", str(recipe_dir), "--tag", tag, "--node", "spark1", "-p", str(profile)
    )
    assert result.exit_code == 1, out
    assert f.target in out and "overlay/device.py" in out
