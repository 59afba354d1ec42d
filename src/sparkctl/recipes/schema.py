"""An image recipe: `images/<name>/recipe.yaml` plus its overlay files, patches and MANIFEST.sha256.

Pure: reading the recipe directory and checking it needs no node. Documented in docs/images.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Annotated

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

from sparkctl.errors import UsageError
from sparkctl.yaml_model import load_yaml_model

RECIPE_FILE = "recipe.yaml"
MANIFEST_FILE = "MANIFEST.sha256"
LABEL_PREFIX = "sparkctl.recipe"
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
ImageId = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
RepoDigest = Annotated[str, Field(pattern=r"^[^@\s]+@sha256:[0-9a-f]{64}$")]
EnvKey = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
# Docker build args and Dockerfile lines are single-line; refusing newlines keeps them unambiguous.
OneLine = Annotated[str, Field(pattern=r"^[^\n\r]*$")]


class RecipeError(UsageError):
    """The recipe directory is invalid or does not verify; the message names the file."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Base(_Strict):
    ref: str = Field(description="The base image as people name it, e.g. lmsysorg/sglang:v0.5.23.")
    id: ImageId | None = Field(
        None, description="Pinned image ID on the node (docker image inspect -f {{.Id}})."
    )
    digest: RepoDigest | None = Field(None, description="Pinned repo digest, e.g. lmsysorg/sglang@sha256:...")


def _relative(value: str, what: str) -> str:
    path = PurePosixPath(value)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ValueError(f"{what} must be a path inside the recipe directory, got {value!r}")
    return str(path)


class OverlayFile(_Strict):
    source: str = Field(description="The file to put in the image, relative to the recipe directory.")
    target: str = Field(description="Absolute path in the image.")
    patch: str | None = Field(
        None, description="Unified diff (relative path): `source` must equal the base's target + this patch."
    )
    base_sha256: Sha256 | None = Field(
        None, description="sha256 of the base's target the patch was written for."
    )
    mode: int | None = Field(
        None, ge=0, le=0o7777, description="File mode; default: the base file's, else 0644."
    )

    @field_validator("source", "patch")
    @classmethod
    def _inside(cls, v: str | None) -> str | None:
        return None if v is None else _relative(v, "a recipe file")

    @field_validator("target")
    @classmethod
    def _absolute(cls, v: str) -> str:
        norm = posixpath.normpath(v)
        if not v.startswith("/") or norm != v or norm == "/":
            raise ValueError(f"target must be a normalised absolute file path in the image, got {v!r}")
        return v

    @model_validator(mode="after")
    def _patch_needs_base_hash(self) -> OverlayFile:
        if self.patch and not self.base_sha256:
            raise ValueError("base_sha256: a patched file must name the sha256 of the base file it patches")
        if self.base_sha256 and not self.patch:
            raise ValueError("base_sha256: only meaningful together with patch")
        return self


class Recipe(_Strict):
    version: int = Field(1, ge=1, le=1)
    description: str
    engine_version: str | None = Field(
        None,
        validation_alias=AliasChoices("engine_version", "sglang_version"),  # its older spelling
        description="The engine release of the base (informational).",
    )
    base: Base
    files: list[OverlayFile] = Field(min_length=1)
    env: dict[EnvKey, OneLine] = Field(default_factory=dict)
    labels: dict[str, OneLine] = Field(default_factory=dict)

    @field_validator("labels")
    @classmethod
    def _own_labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if key.startswith(LABEL_PREFIX):
                raise ValueError(f"{key}: labels under '{LABEL_PREFIX}' are set by sparkctl")
        return v

    @model_validator(mode="after")
    def _unique_targets(self) -> Recipe:
        seen: set[str] = set()
        for i, f in enumerate(self.files):
            if f.target in seen:
                raise ValueError(f"files[{i}].target: {f.target} is listed twice")
            seen.add(f.target)
        return self


@dataclass(frozen=True)
class LoadedRecipe:
    """A recipe with its directory and the bytes of every overlay file and patch (read once)."""

    name: str
    path: Path
    spec: Recipe
    contents: dict[str, bytes]  # target -> overlay bytes
    patches: dict[str, bytes]  # target -> diff bytes
    manifest: dict[str, str]  # recipe-relative path -> sha256

    @property
    def tag(self) -> str:
        from sparkctl.profile.derived import recipe_tag

        return recipe_tag(self.name)

    def file_sha256(self) -> dict[str, str]:
        return {t: hashlib.sha256(b).hexdigest() for t, b in sorted(self.contents.items())}

    def content_hash(self) -> str:
        """What the derivative is made of: pinned base, overlay bytes and modes, env, labels.

        Description, patches and file names do not change the image, so they are not hashed.
        """
        doc = {
            "base": {"id": self.spec.base.id, "digest": self.spec.base.digest},
            "files": {f.target: [self.file_sha256()[f.target], f.mode] for f in self.spec.files},
            "env": self.spec.env,
            "labels": self.spec.labels,
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
MANIFEST_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")


def parse_manifest(text: str, source: str = MANIFEST_FILE) -> dict[str, str]:
    """`sha256sum` output (`<hex>  <path>`) -> {path: hex}; comments and blank lines allowed."""
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = MANIFEST_LINE.match(line)
        if not m:
            raise RecipeError(
                f"{source}:{n}: not a sha256sum line: {line[:80]!r}",
                fix="each line is '<64 hex digits>  <path>' as sha256sum prints it",
            )
        path = _relative(m[2], "a manifest path") if not m[2].startswith("/") else m[2]
        if path in out:
            raise RecipeError(f"{source}:{n}: {path} is listed twice")
        out[path] = m[1]
    return out


def check_manifest(recipe: LoadedRecipe) -> None:
    """Every overlay file has a manifest line and matches it; every line names an overlay file."""
    src = recipe.path / MANIFEST_FILE
    by_source = {f.source: f for f in recipe.spec.files}
    for f in recipe.spec.files:
        want = recipe.manifest.get(f.source)
        if want is None:
            raise RecipeError(
                f"{f.source}: no line in {src}",
                fix=f"add its line: (cd {recipe.path} && sha256sum {f.source} >> {MANIFEST_FILE})",
            )
        have = hashlib.sha256(recipe.contents[f.target]).hexdigest()
        if have != want:
            raise RecipeError(
                f"{f.source}: sha256 {have[:16]}... does not match {MANIFEST_FILE} ({want[:16]}...): "
                "the overlay file was changed after it was reviewed",
                fix=f"restore {recipe.path / f.source}, or review the change and update its line in {src}",
            )
    extra = sorted(set(recipe.manifest) - set(by_source))
    if extra:
        raise RecipeError(
            f"{src} lists {extra[0]}, which is not an overlay file of recipe.yaml",
            fix="remove the line or add the file under files:",
        )


def load_recipe(path: Path) -> LoadedRecipe:
    """Read and validate a recipe directory (recipe.yaml, overlay files, patches, manifest)."""
    path = path.resolve()
    spec_file = path / RECIPE_FILE
    try:
        text = spec_file.read_text()
    except OSError as exc:
        raise RecipeError(f"cannot read {spec_file}: {exc.strerror}") from None
    spec = load_yaml_model(
        text,
        str(spec_file),
        Recipe,
        RecipeError,
        "a recipe (description:, base:, files: ...)",
        "docs/images.md",
    )
    contents, patches = {}, {}
    for f in spec.files:
        contents[f.target] = _read(path, f.source)
        if f.patch:
            patches[f.target] = _read(path, f.patch)
    try:
        manifest_text = (path / MANIFEST_FILE).read_text()
    except OSError as exc:
        raise RecipeError(
            f"cannot read {path / MANIFEST_FILE}: {exc.strerror}",
            fix=f"create it: (cd {path} && sha256sum <overlay files> > {MANIFEST_FILE})",
        ) from None
    manifest = parse_manifest(manifest_text, str(path / MANIFEST_FILE))
    if not NAME_RE.match(path.name):
        raise RecipeError(f"{path}: a recipe directory name must be a lowercase image name ([a-z0-9._-])")
    return LoadedRecipe(path.name, path, spec, contents, patches, manifest)


def _read(root: Path, rel: str) -> bytes:
    file = root / rel
    if file.is_symlink() or not file.is_file():
        raise RecipeError(f"{rel}: not a regular file in {root}")
    return file.read_bytes()


def search_dirs() -> list[Path]:
    """Where recipe names are looked up: $SPARKCTL_IMAGES (':'-separated), ./images, the checkout's images/."""
    dirs = [Path(p) for p in os.environ.get("SPARKCTL_IMAGES", "").split(os.pathsep) if p]
    dirs.append(Path.cwd() / "images")
    checkout = Path(__file__).resolve().parents[3] / "images"  # src/sparkctl/recipes -> repo root
    if checkout not in dirs:
        dirs.append(checkout)
    return dirs


def find_recipe(name_or_path: str) -> Path:
    """A recipe directory from a path or a name under one of `search_dirs()`."""
    direct = Path(name_or_path)
    if (direct / RECIPE_FILE).is_file():
        return direct
    if "/" not in name_or_path:
        for d in search_dirs():
            if (d / name_or_path / RECIPE_FILE).is_file():
                return d / name_or_path
    known = sorted({p.parent.name for d in search_dirs() if d.is_dir() for p in d.glob(f"*/{RECIPE_FILE}")})
    raise RecipeError(
        f"recipe not found: {name_or_path}",
        fix="give a recipe directory or one of: "
        + (", ".join(known) or "(no recipes found)")
        + " (searched "
        + ", ".join(str(d) for d in search_dirs())
        + ")",
    )
