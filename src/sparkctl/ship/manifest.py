"""Per-file sha256 manifests of a Hugging Face cache snapshot, computed on the node itself.

The node runs the constant script `_node.py` (python3 stdlib) through its connector; hashes are
cached there by (size, mtime, inode), so a 20 GB snapshot is read once, not at every check.
Preflight compares `Manifest.digest` across nodes: content, not sizes (a size-only check passes
corrupted shards).
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from sparkctl.facts.hfcache import repo_dir
from sparkctl.ship._node import manifest_digest
from sparkctl.ship.errors import ShipError

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector, RunResult
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


@cache
def node_script() -> str:
    """The node program: tarfilter.py, _node.py, _recv.py, _relay.py, _engine.py, _load.py and _push.py as one stdlib-only script (their
    in-package imports, marked `# node: strip`, dropped; one `from __future__` line first)."""
    here = Path(__file__).parent
    parts = ["from __future__ import annotations"]
    for name in ("tarfilter.py", "_node.py", "_recv.py", "_relay.py", "_engine.py", "_load.py", "_push.py"):
        skipping = False
        for line in (here / name).read_text().splitlines():
            if line.endswith("# node: strip"):
                skipping = line.rstrip().endswith("(  # node: strip")  # a multi-line import
            elif skipping:
                skipping = line != ")"
            elif line != "from __future__ import annotations":
                parts.append(line)
    return "\n".join(parts) + "\n"


# The node's system interpreter (/usr/bin/python3, what DGX OS ships) when it has one, else python3
# on PATH; -S: no site-packages (the programs are stdlib-only). A pyenv/conda shim first on PATH
# costs ~0.1 s per start (measured), and a ship starts several.
PYTHON = [
    "/bin/sh",
    "-c",
    'if [ -x /usr/bin/python3 ]; then exec /usr/bin/python3 -S "$@"; fi; exec python3 -S "$@"',
    "python3",
]


# The program travels zlib-compressed in base64 (23 KB instead of 56 KB): base64's alphabet is plain
# for the SSH transport (no shell decoding of a 74 KB word on the node: 36 -> 34 ms of node CPU per
# op, measured) and for the node-to-node hop's encoding; unpacking costs the node < 1 ms.
# Compiling it cost ~9 ms of node CPU per op, on the critical path of every round trip: the node
# keeps the compiled code (marshal, like a __pycache__ entry) in the node user's ~/.cache/sparkctl,
# named by the program's digest and the interpreter's cache tag, written 0600 and renamed into
# place; a missing, stale or unreadable copy is simply compiled again (and older versions removed).
# Never inside a Hugging Face cache (a directory on the way up holds `hub/`, `.locks/` or a
# `models--*`/`datasets--*` repo: HF_HUB_CACHE itself), and only a copy that is a regular file of
# the user's own, 0600, checked on the opened descriptor (not the name): the serving
# container mounts that read-write, and code it could rewrite must not run on the host. Nor in a
# directory others can write or that is not the user's own.
_UNPACK = """import sys,os,marshal
_d,_z=sys.argv.pop(1),sys.argv.pop(1)
_t=os.path.realpath(os.path.join(os.path.expanduser('~'),'.cache','sparkctl'))
_p=os.path.join(_t,'node-%s.%s'%(_d,sys.implementation.cache_tag))
_a,_c=_t,None
while _p:
 try:_l=os.listdir(_a)
 except OSError:_l=[]
 if 'hub' in _l or '.locks' in _l or [_n for _n in _l if _n.startswith(('models--','datasets--'))]:_p=None
 elif os.path.dirname(_a)==_a:break
 _a=os.path.dirname(_a)
try:
 _s=os.stat(_t)
 if _s.st_uid!=os.geteuid() or _s.st_mode&0o022:_p=None
 with os.fdopen(os.open(_p,os.O_RDONLY|os.O_NOFOLLOW),'rb') as _f:
  _s=os.fstat(_f.fileno())
  if _s.st_uid!=os.geteuid() or _s.st_mode&0o077 or not (_s.st_mode&0o170000==0o100000):raise OSError
  _c=marshal.load(_f)
except Exception:pass
if _c is None:
 import base64,zlib
 _c=compile(zlib.decompress(base64.b64decode(_z)),'sparkctl-node','exec')
 if _p:
  try:
   os.makedirs(_t,0o700,exist_ok=True)
   for _n in os.listdir(_t):
    if _n.startswith('node-') and _n!=os.path.basename(_p):os.unlink(os.path.join(_t,_n))
   _w='%s.%d.part'%(_p,os.getpid())
   with os.fdopen(os.open(_w,os.O_WRONLY|os.O_CREAT|os.O_EXCL|os.O_NOFOLLOW,0o600),'wb') as _f:marshal.dump(_c,_f)
   os.replace(_w,_p)
  except OSError:pass
del _d,_z,_t,_p,_a,_l
exec(_c)"""


@cache
def packed_node_script() -> str:
    return base64.b64encode(zlib.compress(node_script().encode(), 9)).decode()


@cache
def node_script_digest() -> str:
    """Names the node's compiled copy: a new sparkctl (another program) never runs an old copy."""
    return hashlib.sha256(node_script().encode()).hexdigest()[:24]


def node_argv(op: str, *args: str) -> list[str]:
    """argv that runs one op of the node program (constant code; paths are plain arguments)."""
    return [*PYTHON, "-c", _UNPACK, node_script_digest(), packed_node_script(), op, *args]


def load_argv() -> list[str]:
    """The peer's image loader (_load.py): `docker load -q` through the engine API, no docker CLI."""
    return node_argv("load")


def run_op(
    conn: Connector, op: str, *args: str, payload: dict | None = None, timeout: float | None = None
) -> dict:
    data = json.dumps(payload).encode() if payload is not None else None
    res = conn.run(node_argv(op, *args), input=data, timeout=timeout)
    return parse_op_result(res, op)


def parse_op_result(res: RunResult, op: str) -> dict:
    if res.rc == 127 or ("python3" in res.stderr and "not found" in res.stderr):
        raise ShipError(
            "python3 is not available on the node (needed to hash and move weights)",
            node=res.node,
            fix="install python3 on the node (DGX OS ships it)",
        )
    if not res.ok:
        last = (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise ShipError(f"weights {op} on the node failed (exit {res.rc}): {last}", node=res.node)
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ShipError(f"weights {op} on the node printed no result", node=res.node) from None


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
