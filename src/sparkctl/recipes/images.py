"""Reading images on one node's Docker engine: the recipe's pinned base, and files read out of an
image through a created, never started, container."""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkctl.errors import SparkctlError
from sparkctl.recipes.schema import LABEL_PREFIX, RECIPE_FILE, LoadedRecipe, RecipeError

if TYPE_CHECKING:
    import docker
    from docker.models.images import Image


@dataclass(frozen=True)
class BaseFile:
    data: bytes
    mode: int


def docker_errors():
    """docker.errors, imported where it is needed (docker is heavy)."""
    import docker.errors

    return docker.errors


def where(recipe: LoadedRecipe) -> str:
    """The recipe file, for an error line."""
    return str(recipe.path / RECIPE_FILE)


def resolve_base(client: docker.DockerClient, recipe: LoadedRecipe, node: str) -> Image:
    """The pinned base image on this engine; refuses a missing pin, a missing image or a mismatch."""
    errors = docker_errors()
    base = recipe.spec.base
    found = None
    try:
        found = client.images.get(base.ref)
    except (errors.ImageNotFound, errors.NullResource):
        pass
    except errors.APIError as exc:
        raise SparkctlError(f"docker engine refused image lookup: {exc.explanation}", node=node) from None
    seen = f"; {base.ref} there is {found.id}" if found is not None else f"; {base.ref} is not there either"
    if not base.id and not base.digest:
        raise RecipeError(
            f"{where(recipe)}: base.id is not set, so the base is not pinned{seen}",
            fix="pin it: add `id: <image ID>` under base: (docker image inspect -f '{{.Id}}' "
            f"{base.ref} on the node); build then checks the pristine files against base_sha256",
            node=node,
        )
    pin = base.id or base.digest
    try:
        image = client.images.get(pin)
    except errors.ImageNotFound:
        raise RecipeError(
            f"{where(recipe)}: pinned base {pin} ({base.ref}) is not on this node{seen}",
            fix=f"load the pinned base on the node (docker pull {base.digest or base.ref}, or ship it), "
            "or re-pin base.id after reviewing the new base",
            node=node,
        ) from None
    if base.id and image.id != base.id:
        raise RecipeError(f"{where(recipe)}: base.id {base.id} resolves to {image.id}", node=node)
    if base.digest and base.digest not in image.attrs.get("RepoDigests", []):
        raise RecipeError(
            f"{where(recipe)}: image {image.id} does not carry the pinned digest {base.digest}",
            fix="the digest and the id name different images: keep the one you reviewed",
            node=node,
        )
    return image


def extract_files(
    client: docker.DockerClient, image_id: str, paths: list[str], node: str
) -> dict[str, BaseFile]:
    """Read files out of an image through a created, never started, container (missing ones are left out)."""
    errors = docker_errors()
    container = client.containers.create(
        image_id,
        entrypoint=["/sparkctl-never-started"],
        command=[],
        network_disabled=True,
        labels={f"{LABEL_PREFIX}.extract": "1"},
    )
    try:
        out: dict[str, BaseFile] = {}
        for path in paths:
            try:
                stream, _stat = container.get_archive(path)
            except errors.NotFound:
                continue
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                member = tar.next()
                if member is None or not member.isfile():
                    kind = (
                        "missing"
                        if member is None
                        else ("a symlink" if member.issym() else "not a regular file")
                    )
                    raise SparkctlError(
                        f"{path} in image {image_id[:19]} is {kind}",
                        node=node,
                        fix="point the recipe's target at the real file",
                    )
                out[path] = BaseFile(tar.extractfile(member).read(), member.mode & 0o7777)  # type: ignore[union-attr]
        return out
    finally:
        container.remove(force=True)
