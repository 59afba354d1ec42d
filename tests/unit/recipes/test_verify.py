"""Re-checking a derivative on a fake Docker engine: missing image, recipe hash, base, overlaid files."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import docker.errors

from sparkctl.findings import Severity
from sparkctl.recipes import load_recipe
from sparkctl.recipes.schema import LABEL_PREFIX
from sparkctl.recipes.verify import verify_image
from tests.unit.recipes.test_images import PIN, FakeClient, FakeImage
from tests.unit.recipes.test_schema import TARGET, edit, recipe_dir

__all__ = ["recipe_dir"]  # the fixture


def tar_of(path: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(path.rsplit("/", 1)[-1])
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class FakeContainer:
    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files

    def get_archive(self, path: str):
        if path not in self.files:
            raise docker.errors.NotFound(path)
        return iter([tar_of(path, self.files[path])]), {}

    def remove(self, force: bool = False) -> None:
        pass


class FakeContainers:
    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files

    def create(self, image_id: str, **kwargs) -> FakeContainer:
        return FakeContainer(self.files)


def derivative(recipe, *, recipe_hash: str, layers: list[str], files: dict[str, bytes]) -> FakeClient:
    image = FakeImage("sha256:" + "99" * 32)
    image.labels = {f"{LABEL_PREFIX}.hash": recipe_hash, f"{LABEL_PREFIX}.base": PIN}
    image.attrs["RootFS"] = {"Layers": layers}
    base = FakeImage(PIN)
    base.attrs["RootFS"] = {"Layers": ["l1"]}
    client = FakeClient(**{"tag:1": image, PIN: base})
    client.containers = FakeContainers(files)
    return client


def test_an_image_missing_on_the_node_is_one_error_with_the_build_command(recipe_dir: Path) -> None:
    (f,) = verify_image(FakeClient(), load_recipe(recipe_dir), "tag:1", "n1")
    assert f.severity == Severity.ERROR and "not on this node" in f.message
    assert "sparkctl image build" in (f.fix or "")


def test_a_derivative_of_this_recipe_verifies_and_a_tampered_one_names_each_check(recipe_dir: Path) -> None:
    edit(recipe_dir, base={"ref": "lmsysorg/sglang:v0.5.23", "id": PIN})
    recipe = load_recipe(recipe_dir)
    good = derivative(
        recipe,
        recipe_hash=recipe.content_hash(),
        layers=["l1", "l2"],
        files={TARGET: recipe.contents[TARGET]},
    )
    found = verify_image(good, recipe, "tag:1", "n1")
    assert [(f.check, f.severity) for f in found] == [
        ("RecipeHash", Severity.OK),
        ("RecipeBase", Severity.OK),
        ("RecipeFile", Severity.OK),
    ]
    bad = derivative(recipe, recipe_hash="x", layers=["l0", "l2"], files={TARGET: b"changed"})
    found = verify_image(bad, recipe, "tag:1", "n1")
    assert [f.severity for f in found] == [Severity.ERROR] * 3
    assert "does not contain the base's layers" in found[1].message and "has sha256" in found[2].message
