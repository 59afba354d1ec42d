"""Re-checking an existing derivative image: built from this recipe (its hash label), on its
pinned base (the base's layers first), every overlaid file as MANIFEST.sha256 records it."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from sparkctl.findings import Finding, Severity
from sparkctl.recipes.images import docker_errors, extract_files
from sparkctl.recipes.schema import LABEL_PREFIX, LoadedRecipe

if TYPE_CHECKING:
    import docker
    from docker.models.images import Image


def verify_image(client: docker.DockerClient, recipe: LoadedRecipe, ref: str, node: str) -> list[Finding]:
    """Re-check an existing derivative: built from this recipe, on its base, files as in the manifest."""
    errors = docker_errors()
    try:
        image = client.images.get(ref)
    except errors.ImageNotFound:
        return [
            Finding(
                "RecipeImage",
                Severity.ERROR,
                f"image {ref} is not on this node",
                node=node,
                fix=f"sparkctl image build {recipe.name} --node {node}",
            )
        ]
    labels = image.labels or {}
    return [
        _verify_hash(recipe, labels, ref, node),
        _verify_base(client, recipe, image, labels.get(f"{LABEL_PREFIX}.base", ""), ref, node),
        *_verify_files(client, recipe, image, ref, node),
    ]


def _verify_hash(recipe: LoadedRecipe, labels: dict[str, str], ref: str, node: str) -> Finding:
    """RecipeHash: the image's recipe-hash label against this recipe's content hash."""
    want_hash = recipe.content_hash()
    have_hash = labels.get(f"{LABEL_PREFIX}.hash")
    if have_hash == want_hash:
        return Finding(
            "RecipeHash",
            Severity.OK,
            f"{ref} was built from this recipe ({want_hash[:12]})",
            node=node,
            data={"hash": want_hash},
        )
    return Finding(
        "RecipeHash",
        Severity.ERROR,
        f"{ref} carries recipe hash {have_hash or '(none)'}, this recipe is {want_hash[:12]}",
        fix=f"rebuild: sparkctl image build {recipe.name} --node {node}",
        node=node,
    )


def _verify_base(
    client: docker.DockerClient, recipe: LoadedRecipe, image: Image, base_id: str, ref: str, node: str
) -> Finding:
    """RecipeBase: built on the pinned base, and the base's layers are the image's first layers."""
    errors = docker_errors()
    pin = recipe.spec.base.id
    if pin and base_id != pin:
        return Finding(
            "RecipeBase",
            Severity.ERROR,
            f"{ref} was built on {base_id or '(unknown)'}, the recipe pins {pin}",
            node=node,
        )
    try:
        base_layers = client.images.get(base_id).attrs["RootFS"]["Layers"]
    except (errors.ImageNotFound, errors.NullResource):
        return Finding(
            "RecipeBase",
            Severity.SKIP,
            f"base {base_id or '(unknown)'} is not on this node; layers not compared",
            node=node,
        )
    layers = image.attrs["RootFS"]["Layers"]
    extra = len(layers) - len(base_layers)
    ok = layers[: len(base_layers)] == base_layers
    return Finding(
        "RecipeBase",
        Severity.OK if ok else Severity.ERROR,
        f"{extra} layer(s) on top of the base" if ok else f"{ref} does not contain the base's layers",
        node=node,
        data={"added_layers": extra},
    )


def _verify_files(
    client: docker.DockerClient, recipe: LoadedRecipe, image: Image, ref: str, node: str
) -> list[Finding]:
    """RecipeFile: each overlaid file in the image has the sha256 MANIFEST.sha256 records."""
    inside = extract_files(client, image.id, sorted(recipe.contents), node)
    found: list[Finding] = []
    for f in recipe.spec.files:
        want = recipe.manifest.get(f.source)
        got = inside.get(f.target)
        have = hashlib.sha256(got.data).hexdigest() if got else None
        if have is not None and have == want:
            found.append(Finding("RecipeFile", Severity.OK, f"{f.target} matches {f.source}", node=node))
        else:
            seen = (
                "is missing"
                if have is None
                else f"has sha256 {have[:16]}..., MANIFEST.sha256 says {str(want)[:16]}..."
            )
            found.append(
                Finding(
                    "RecipeFile",
                    Severity.ERROR,
                    f"{f.target} in {ref} {seen} ({f.source})",
                    fix=f"rebuild: sparkctl image build {recipe.name} --node {node}",
                    node=node,
                )
            )
    return found
