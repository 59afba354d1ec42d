"""Where a profile's model is on this machine: a Hugging Face cache
(`<hf_cache>/hub/models--<org>--<name>/snapshots/<rev>/`) or any directory holding config.json.
What is read from the directory found is each engine's own (its `load`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkctl.errors import ExitCode, SparkctlError


@dataclass
class ModelLookup:
    target: Any | None  # what the engine's `load` made of the directory found (None: not found)
    draft: Any | None
    searched: dict[str, list[str]] = field(default_factory=dict)  # role -> paths looked at

    def missing(self, profile) -> list[str]:  # Profile
        roles = ["target"] + (["draft"] if profile.model.draft is not None else [])
        return [r for r in roles if getattr(self, r) is None]


def hf_snapshot_dir(hf_cache: Path, repo_id: str, revision: str | None = None) -> Path | None:
    """`<hf_cache>/hub/models--org--name/snapshots/<rev>` (revision: commit, branch/tag via refs/)."""
    from sparkctl.facts.hfcache import repo_dir_name
    from sparkctl.node.base import resolve_commit  # the same resolution `ship` uses on the nodes

    base = hf_cache / "hub" if (hf_cache / "hub").is_dir() else hf_cache  # HF_HOME, or a hub/ dir
    repo = base / repo_dir_name(repo_id)
    commit = resolve_commit(str(repo), revision or "main")
    return repo / "snapshots" / commit if commit and (repo / "snapshots" / commit).is_dir() else None


def find_model_dir(repo_id: str, revision: str | None, search: list[Path]) -> Path | None:
    """The first directory with the model's config.json in each of `search` (HF caches or plain
    model directories)."""
    for root in search:
        snap = hf_snapshot_dir(root, repo_id, revision)
        if snap is not None and (snap / "config.json").is_file():
            return snap
        plain = root / repo_id.replace("/", "--")
        for cand in (plain, root / repo_id.rsplit("/", 1)[-1]):  # plain model directories
            if (cand / "config.json").is_file():
                return cand
    return None


def model_search_paths(profile) -> list[Path]:  # Profile
    paths = [Path(os.path.expanduser(profile.model.hf_cache))]
    for node in profile.nodes:
        if node.is_local and node.hf_cache:
            paths.append(Path(os.path.expanduser(node.hf_cache)))
    if os.environ.get("HF_HOME"):
        paths.append(Path(os.environ["HF_HOME"]))
    paths.append(Path.home() / ".cache" / "huggingface")
    return list(dict.fromkeys(paths))


def safetensors_bytes(directory: Path) -> int:
    """Tensor bytes of a checkpoint from its safetensors headers (8-byte length + JSON, the largest
    data offset of each shard): the file sizes would say 0 for header-only copies."""
    import json
    import struct

    total = 0
    for shard in sorted(directory.glob("*.safetensors")):
        try:
            with shard.open("rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(n))
        except (OSError, ValueError, struct.error):
            continue
        ends = [
            v["data_offsets"][1] for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)
        ]
        total += max(ends, default=0)
    return total


def _as_path(directory: Path, _repo_id: str) -> Path:
    return directory


def lookup_models(
    profile,
    target_dir: Path | None = None,
    draft_dir: Path | None = None,
    load: Callable[[Path, str], Any] = _as_path,
) -> ModelLookup:
    """The target (and draft) of the profile, each `load(directory, repo_id)` where found: the
    directory given (`--target-dir/--draft-dir`, `model.<role>.local_dir`), else the search paths."""
    m = profile.model
    search = model_search_paths(profile)
    existing = [p for p in search if p.is_dir()]
    out = ModelLookup(None, None)
    for role, ref, given in (("target", m.target, target_dir), ("draft", m.draft, draft_dir)):
        if ref is None:
            continue
        given = given or (Path(ref.local_dir).expanduser() if ref.local_dir else None)
        if given is not None:
            out.searched[role] = [str(given)]
            facts = load(given, ref.id) if (given / "config.json").is_file() else None
        else:
            out.searched[role] = [str(p) for p in search]
            found = find_model_dir(ref.id, ref.revision, existing)
            facts = load(found, ref.id) if found is not None else None
        setattr(out, role, facts)
    return out


class ModelNotFound(SparkctlError):
    """`fit` has nothing to plan: the model's config.json is not on this machine."""

    exit_code = ExitCode.CHECK_FAILED


def require_models(found: ModelLookup, profile) -> None:  # Profile
    missing = found.missing(profile)
    if not missing:
        return
    refs = {"target": profile.model.target, "draft": profile.model.draft}
    where = "; ".join(
        f"{r} {refs[r].id}: searched {', '.join(found.searched.get(r, [])) or 'nothing'}" for r in missing
    )
    raise ModelNotFound(
        f"model not on this machine, nothing was checked ({where})",
        fix="download it (`huggingface-cli download <id>`), copy it here with `sparkctl ship --weights`, point "
        "at a directory with `--target-dir/--draft-dir`, or pass --allow-missing to check the flags only",
    )
