"""Hugging Face cache facts: where a node's cache is, and which snapshots of a repo it holds."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from sparkctl.facts.probe import Probe, checked, sh_argv


def repo_dir_name(model_id: str) -> str:
    """org/name -> models--org--name, the Hugging Face cache's directory for a model repo."""
    return "models--" + model_id.replace("/", "--")


def repo_dir(hf_cache: str, model_id: str) -> str:
    """<hf_cache>/hub/models--org--name (HF_HOME is the cache root mounted into the container)."""
    return posixpath.join(hf_cache, "hub", repo_dir_name(model_id))


# $1 = repo dir (<hf_cache>/hub/models--org--name).
SNAPSHOT_SCRIPT = r"""d="$1"
[ -d "$d" ] || { echo norepo; exit 0; }
if [ -d "$d/refs" ]; then
  find "$d/refs" -type f | while IFS= read -r f; do c=; IFS= read -r c < "$f"; printf 'ref\t%s\t%s\n' "${f#"$d"/refs/}" "$c"; done
fi
for s in "$d"/snapshots/*/; do
  [ -d "$s" ] || continue
  n=$(ls -A "$s" | wc -l)
  s=${s%/}; printf 'snap\t%s\t%s\n' "${s##*/}" "$n"
done
"""

_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_SHORT_HEX = re.compile(r"^[0-9a-f]{7,39}$")


@dataclass(frozen=True)
class RepoListing:
    """What is in `<hf_cache>/hub/models--org--name` on one node."""

    exists: bool
    refs: dict[str, str] = field(default_factory=dict)  # "main" -> commit
    snapshots: dict[str, int] = field(default_factory=dict)  # commit -> number of entries


def parse_repo_listing(text: str) -> RepoListing:
    """Output of SNAPSHOT_SCRIPT: `norepo`, or `ref\\t<name>\\t<commit>` / `snap\\t<commit>\\t<n>` lines.

    Content (sha256 per file) is compared separately, with ship's manifest (checks.check_weights_content)."""
    if text.strip() == "norepo":
        return RepoListing(exists=False)
    refs: dict[str, str] = {}
    snaps: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if parts[0] == "ref" and len(parts) == 3:
            refs[parts[1]] = parts[2].strip()
        elif parts[0] == "snap" and len(parts) == 3 and parts[2].isdigit():
            snaps[parts[1]] = int(parts[2])
    return RepoListing(exists=True, refs=refs, snapshots=snaps)


def resolve_revision(listing: RepoListing, revision: str | None) -> str | None:
    """The snapshot commit a revision names: a full hash, a ref (branch/tag/pr), or a short hash."""
    rev = revision or "main"
    if _HEX40.match(rev):
        return rev if rev in listing.snapshots else None
    commit = listing.refs.get(rev)
    if commit:
        return commit if commit in listing.snapshots else None
    if _SHORT_HEX.match(rev):
        hits = [c for c in listing.snapshots if c.startswith(rev)]
        return hits[0] if len(hits) == 1 else None
    return None


def repo_probe(repo_dir: str) -> Probe:
    return Probe(
        tuple(sh_argv(SNAPSHOT_SCRIPT, repo_dir)), checked(f"listing {repo_dir}", parse_repo_listing)
    )
