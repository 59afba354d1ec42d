"""Building a derivative without a node: patches must reproduce the overlay, the context is byte-identical."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from sparkctl.recipes import RecipeError, load_recipe
from sparkctl.recipes.build import OVERLAY_MTIME, build_context, check_patches, dockerfile, overlay_modes
from sparkctl.recipes.images import BaseFile
from tests.unit.recipes.test_schema import BASE_ID, TARGET, edit, pristine_of, recipe_dir

__all__ = ["recipe_dir"]  # the fixture


def test_patch_that_does_not_reproduce_the_overlay_is_refused(recipe_dir: Path) -> None:
    recipe = load_recipe(recipe_dir)
    pristine = pristine_of(recipe)
    other_base = pristine.replace(b"Reduce CPU usage", b"Reduce the CPU usage")
    with pytest.raises(RecipeError, match=r"patches/device.py.patch: the base's .* has sha256"):
        check_patches(recipe, {TARGET: BaseFile(other_base, 0o644)})
    with pytest.raises(RecipeError, match=r"patches/device.py.patch: .* is not in the base image"):
        check_patches(recipe, {})


def test_build_context_is_byte_identical_and_adds_files_only(recipe_dir: Path) -> None:
    edit(recipe_dir, env={"A": 'say "hi" $HOME \\ ok'})
    recipe = load_recipe(recipe_dir)
    modes = overlay_modes(recipe, {TARGET: BaseFile(b"", 0o640)})
    assert modes == {TARGET: 0o640}  # replacing a file keeps the base file's mode
    ctx = build_context(recipe, BASE_ID, modes)
    assert ctx == build_context(load_recipe(recipe_dir), BASE_ID, modes)
    with tarfile.open(fileobj=io.BytesIO(ctx)) as tar:
        assert tar.getnames() == ["Dockerfile", "overlay.tar"]
        text = tar.extractfile("Dockerfile").read().decode()
        overlay = tar.extractfile("overlay.tar").read()
    assert text == f'FROM {BASE_ID}\nADD overlay.tar /\nENV A="say \\"hi\\" \\$HOME \\\\ ok"\n'
    assert text == dockerfile(BASE_ID, recipe.spec.env)
    with tarfile.open(fileobj=io.BytesIO(overlay)) as tar:
        (member,) = tar.getmembers()  # no directory entries: the base's directories stay as they are
        assert member.name == TARGET.lstrip("/") and member.isfile()
        assert (member.mode, member.mtime, member.uid, member.gid) == (0o640, OVERLAY_MTIME, 0, 0)
        assert tar.extractfile(member).read() == recipe.contents[TARGET]
