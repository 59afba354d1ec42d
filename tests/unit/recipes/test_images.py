"""The recipe's pinned base on a node's Docker (a fake engine): unpinned, missing and mismatched bases are refused."""

from __future__ import annotations

from pathlib import Path

import docker.errors
import pytest

from sparkctl.recipes import RecipeError, load_recipe
from sparkctl.recipes.images import resolve_base
from tests.unit.recipes.test_schema import edit, recipe_dir

__all__ = ["recipe_dir"]  # the fixture

PIN = "sha256:" + "cd" * 32


class FakeImage:
    def __init__(self, image_id: str, digests: list[str] | None = None) -> None:
        self.id = image_id
        self.attrs = {"RepoDigests": digests or []}


class FakeImages:
    def __init__(self, images: dict[str, FakeImage]) -> None:
        self.images = images

    def get(self, ref: str) -> FakeImage:
        if ref not in self.images:
            raise docker.errors.ImageNotFound(ref)
        return self.images[ref]


class FakeClient:
    def __init__(self, **images: FakeImage) -> None:
        self.images = FakeImages(images)


def pinned(recipe_dir: Path, **base: str):
    edit(recipe_dir, base={"ref": "lmsysorg/sglang:v0.5.23", **base})
    return load_recipe(recipe_dir)


def test_the_pinned_base_is_returned_when_the_node_has_it(recipe_dir: Path) -> None:
    image = FakeImage(PIN)
    assert resolve_base(FakeClient(**{PIN: image}), pinned(recipe_dir, id=PIN), "n1") is image


def test_an_unpinned_base_is_refused_naming_what_the_ref_is_there(recipe_dir: Path) -> None:
    client = FakeClient(**{"lmsysorg/sglang:v0.5.23": FakeImage(PIN)})
    with pytest.raises(RecipeError, match=f"base.id is not set.*there is {PIN}") as err:
        resolve_base(client, pinned(recipe_dir), "n1")
    assert "pin it" in (err.value.fix or "")


def test_a_pinned_base_missing_on_the_node_is_refused(recipe_dir: Path) -> None:
    with pytest.raises(RecipeError, match="is not on this node; lmsysorg/sglang:v0.5.23 is not there either"):
        resolve_base(FakeClient(), pinned(recipe_dir, id=PIN), "n1")


def test_a_digest_the_image_does_not_carry_is_refused(recipe_dir: Path) -> None:
    digest = "lmsysorg/sglang@sha256:" + "ef" * 32
    client = FakeClient(**{digest: FakeImage(PIN, digests=["other@sha256:" + "00" * 32])})
    with pytest.raises(RecipeError, match="does not carry the pinned digest"):
        resolve_base(client, pinned(recipe_dir, digest=digest), "n1")
