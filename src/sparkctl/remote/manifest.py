"""Per-file sha256 manifests of a Hugging Face cache snapshot, computed on the node itself.

The node runs the constant node program (sparkctl/node/, python3 stdlib) through its connector; hashes are
cached there by (size, mtime, inode), so a 20 GB snapshot is read once, not at every check.
Preflight compares `Manifest.digest` across nodes: content, not sizes (a size-only check passes
corrupted shards).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from sparkctl.facts.hfcache import repo_dir
from sparkctl.node.base import manifest_digest
from sparkctl.remote.ops import run_op

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector
    from sparkctl.profile.schema import ModelRef

__all__ = ["FileEntry", "Manifest", "manifest_digest", "snapshot_manifest"]


@dataclass(frozen=True)
class FileEntry:
    sha256: str | None  # None only in a lazy manifest: not hashed on the node yet
    size: int
    blob: str | None  # blobs/<name> the snapshot file links to; None for a plain file

    def dest(self, rel: str, commit: str) -> str:
        """Where the file's bytes live, relative to the repo dir (identical on every node)."""
        return f"blobs/{self.blob}" if self.blob else f"snapshots/{commit}/{rel}"


@dataclass(frozen=True)
class Manifest:
    """One node's view of `model_id@revision` in its HF cache."""

    node: str
    model_id: str
    revision: str
    repo_dir: str
    commit: str | None  # None: the revision is not in this cache
    files: dict[str, FileEntry] = field(default_factory=dict)
    broken: list[str] = field(default_factory=list)  # snapshot links whose blob is missing
    marker: str | None = None  # digest recorded when sparkctl finished shipping this snapshot
    outside: list[list[str]] = field(default_factory=list)  # [rel, where] links leading out of the cache
    refs: tuple[str, ...] = ()  # refs/<name> naming `commit` (branches, tags): shipped with it

    @property
    def present(self) -> bool:
        return self.commit is not None and bool(self.files) and not self.broken and not self.outside

    @property
    def hashed(self) -> bool:
        return all(f.sha256 for f in self.files.values())

    @property
    def digest(self) -> str:
        """Content digest of the whole snapshot: sha256 over sorted (path, file sha256)."""
        if not self.hashed:
            raise ValueError("lazy manifest: not every file is hashed yet")
        return manifest_digest({rel: f.sha256 for rel, f in self.files.items()})

    @property
    def complete(self) -> bool:
        """Marked complete by sparkctl and still matching that mark."""
        return self.present and self.hashed and self.marker == self.digest

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files.values())

    def with_hashes(self, by_dest: dict[str, str]) -> Manifest:
        """Fill in sha256s known by destination path (e.g. computed while sending)."""
        assert self.commit is not None
        files = {
            rel: f if f.sha256 else replace(f, sha256=by_dest.get(f.dest(rel, self.commit)))
            for rel, f in self.files.items()
        }
        return replace(self, files=files)

    def to_json(self) -> dict:
        return {
            "node": self.node,
            "model": self.model_id,
            "revision": self.revision,
            "commit": self.commit,
            "digest": self.digest if self.present and self.hashed else None,
            "complete": self.complete,
            "files": len(self.files),
            "bytes": self.total_bytes,
            "broken": self.broken,
        }


def revision_of(ref: ModelRef) -> str:
    return ref.revision or "main"


def parse_manifest(node: str, model_id: str, revision: str, repo: str, doc: dict) -> Manifest:
    return Manifest(
        node=node,
        model_id=model_id,
        revision=revision,
        repo_dir=repo,
        commit=doc.get("commit"),
        files={rel: FileEntry(v[0], int(v[1]), v[2]) for rel, v in doc.get("files", {}).items()},
        broken=list(doc.get("broken", [])),
        outside=[list(x) for x in doc.get("outside", [])],
        marker=doc.get("marker"),
        refs=tuple(doc.get("refs") or ()),
    )


def snapshot_manifest(
    conn: Connector, hf_cache: str, model_ref: ModelRef, *, lazy: bool = False, deep: bool = False
) -> Manifest:
    """The manifest of `model_ref` in the node's HF cache (hashes computed on the node, cached there).

    `hf_cache` is the node's path (see `plan.hf_cache_for`); a revision may be a commit or a branch in
    refs/. `lazy` hashes nothing new: files not hashed before have sha256 None (ship fills them in
    while sending, so a first sync reads each file once). Otherwise hashes come from the node's
    quick check (size, mtime, inode, device unchanged: the cached sha256); `deep` rehashes every byte.
    """
    repo = repo_dir(hf_cache, model_ref.id)
    revision = revision_of(model_ref)
    mode = ["deep"] if deep else ["lazy"] if lazy else []
    doc = run_op(conn, "manifest", repo, revision, *mode, timeout=None)
    return parse_manifest(conn.node, model_ref.id, revision, repo, doc)


@dataclass(frozen=True)
class WeightsDiff:
    """What a peer needs so its snapshot equals the source's."""

    send: dict[str, int]  # dest path (relative to repo) -> size
    have: int  # files already identical on the peer
    unknown: list[str]  # dests the peer has but the source has not hashed yet: hash, then diff again

    @property
    def bytes(self) -> int:
        return sum(self.send.values())


def diff_files(source: Manifest, peer_hashes: dict[str, list | None]) -> WeightsDiff:
    """Pure: which destination files are missing or differ on the peer."""
    assert source.commit is not None
    send: dict[str, int] = {}
    have, unknown = 0, []
    for rel, entry in source.files.items():
        dest = entry.dest(rel, source.commit)
        got = peer_hashes.get(dest)
        if got is None:
            send[dest] = entry.size
        elif entry.sha256 is None:
            unknown.append(dest)
        elif got[0] == entry.sha256:
            have += 1
        else:
            send[dest] = entry.size
    return WeightsDiff(send=send, have=have, unknown=sorted(set(unknown)))


def dest_paths(source: Manifest) -> list[str]:
    assert source.commit is not None
    return sorted({e.dest(rel, source.commit) for rel, e in source.files.items()})
