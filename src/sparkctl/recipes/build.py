"""Build and verify a recipe's derivative image on one node's Docker engine (docker SDK).

The flow: the pinned base must be on the node; pristine files come out of a created (never
started) container of the base; patches must reproduce the overlay files exactly; the context
(a Dockerfile plus one overlay tar, built in memory) adds exactly one layer; the result is then
re-checked file by file against MANIFEST.sha256. Reading the base and files out of an image is
images.py; the re-check of an existing derivative is verify.py.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkctl.errors import SparkctlError
from sparkctl.findings import Severity
from sparkctl.recipes import patch as patchlib
from sparkctl.recipes.images import BaseFile, docker_errors, extract_files, resolve_base, where
from sparkctl.recipes.schema import LABEL_PREFIX, LoadedRecipe, RecipeError, check_manifest
from sparkctl.recipes.verify import verify_image

if TYPE_CHECKING:
    import docker

# Overlay files get one fixed mtime so the overlay tar is byte-identical between builds. It must
# differ from the base file's mtime: Python trusts a __pycache__ entry whose recorded source mtime
# and size match, so a same-size patch with the old mtime would keep running the old bytecode.
OVERLAY_MTIME = 1_000_000_000  # 2001-09-09
OVERLAY_TAR = "overlay.tar"


@dataclass
class BuildResult:
    node: str
    tag: str
    image_id: str
    base_id: str
    recipe_hash: str
    added_layers: int
    added_bytes: int
    files: dict[str, str] = field(default_factory=dict)  # target -> sha256

    def to_json(self) -> dict:
        return self.__dict__.copy()


def check_patches(recipe: LoadedRecipe, pristine: dict[str, BaseFile], node: str | None = None) -> None:
    """Each patched overlay file must be exactly the base's file (pinned by sha256) plus its patch."""
    for i, f in enumerate(recipe.spec.files):
        if not f.patch:
            continue
        base = pristine.get(f.target)
        if base is None:
            raise RecipeError(
                f"{f.patch}: {f.target} is not in the base image, nothing to patch",
                fix="check files[].target against the base",
                node=node,
            )
        have = hashlib.sha256(base.data).hexdigest()
        if have != f.base_sha256:
            raise RecipeError(
                f"{f.patch}: the base's {f.target} has sha256 {have[:16]}..., the patch was written for "
                f"{f.base_sha256[:16]}... ({where(recipe)} files[{i}].base_sha256)",
                fix="this base is not the release the patch targets: pin the right base or port the patch",
                node=node,
            )
        try:
            result = patchlib.apply(base.data, recipe.patches[f.target])
        except patchlib.PatchError as exc:
            raise RecipeError(f"{f.patch}: does not apply cleanly to {f.target}: {exc}", node=node) from None
        if result != recipe.contents[f.target]:
            raise RecipeError(
                f"{f.source}: is not the base's {f.target} with {f.patch} applied",
                fix=f"regenerate {f.source} from the base file and {f.patch}, review it, update MANIFEST.sha256",
                node=node,
            )


def overlay_modes(recipe: LoadedRecipe, pristine: dict[str, BaseFile]) -> dict[str, int]:
    """Mode per target: the recipe's, else the base file's (replacing keeps it), else 0644."""
    return {
        f.target: f.mode
        if f.mode is not None
        else (pristine[f.target].mode if f.target in pristine else 0o644)
        for f in recipe.spec.files
    }


def overlay_tar(recipe: LoadedRecipe, modes: dict[str, int]) -> bytes:
    """Files only (no directory entries): ADD then leaves the base's directories' owners and modes alone."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for target in sorted(recipe.contents):
            data = recipe.contents[target]
            info = tarfile.TarInfo(target.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), modes[target], OVERLAY_MTIME
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _env_value(value: str) -> str:
    # Dockerfile ENV: double-quoted, with \ " and $ escaped so nothing is expanded.
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def dockerfile(base_id: str, env: dict[str, str]) -> str:
    lines = [f"FROM {base_id}", f"ADD {OVERLAY_TAR} /"]  # a local tar is unpacked by ADD: one layer
    lines += [f"ENV {k}={_env_value(v)}" for k, v in sorted(env.items())]
    return "\n".join(lines) + "\n"


def build_context(recipe: LoadedRecipe, base_id: str, modes: dict[str, int]) -> bytes:
    """The whole docker build context, in memory."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (
            ("Dockerfile", dockerfile(base_id, recipe.spec.env).encode()),
            (OVERLAY_TAR, overlay_tar(recipe, modes)),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), OVERLAY_MTIME
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def image_labels(recipe: LoadedRecipe, base_id: str) -> dict[str, str]:
    return {
        **recipe.spec.labels,
        LABEL_PREFIX: recipe.name,
        f"{LABEL_PREFIX}.hash": recipe.content_hash(),
        f"{LABEL_PREFIX}.base": base_id,
        f"{LABEL_PREFIX}.base-ref": recipe.spec.base.ref,
        f"{LABEL_PREFIX}.files": json.dumps(recipe.file_sha256(), sort_keys=True),
    }


def build(
    client: docker.DockerClient, recipe: LoadedRecipe, node: str, tag: str | None = None
) -> BuildResult:
    """Verify everything, build the derivative on this engine, then verify the image."""
    check_manifest(recipe)
    base = resolve_base(client, recipe, node)
    pristine = extract_files(client, base.id, sorted(recipe.contents), node)
    check_patches(recipe, pristine, node)
    tag = tag or recipe.tag
    errors = docker_errors()
    try:
        image, _log = client.images.build(
            fileobj=io.BytesIO(build_context(recipe, base.id, overlay_modes(recipe, pristine))),
            custom_context=True,
            tag=tag,
            labels=image_labels(recipe, base.id),
            pull=False,
            rm=True,
            forcerm=True,
        )
    except errors.BuildError as exc:
        tail = [str(line.get("stream") or line.get("error") or "").strip() for line in exc.build_log]
        last = next((t for t in reversed(tail) if t), exc.msg)
        raise SparkctlError(f"docker build of {tag} failed: {last}", node=node) from None
    except errors.APIError as exc:
        raise SparkctlError(f"docker build of {tag} failed: {exc.explanation}", node=node) from None
    base_layers = base.attrs["RootFS"]["Layers"]
    layers = image.attrs["RootFS"]["Layers"]
    if layers[: len(base_layers)] != base_layers:
        raise SparkctlError(f"{tag} ({image.id}) is not built on the base {base.id}", node=node)
    problems = [f for f in verify_image(client, recipe, tag, node) if f.severity == Severity.ERROR]
    if problems:
        raise SparkctlError(f"{tag} was built but does not verify: {problems[0].message}", node=node)
    return BuildResult(
        node=node,
        tag=tag,
        image_id=image.id,
        base_id=base.id,
        recipe_hash=recipe.content_hash(),
        added_layers=len(layers) - len(base_layers),
        added_bytes=image.attrs["Size"] - base.attrs["Size"],
        files=recipe.file_sha256(),
    )
