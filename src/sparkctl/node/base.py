"""Runs ON a node (python3 stdlib only): manifests, hashes and names of weights. See `node_script()` in
node/pack.py: this file and the others of its FILES are one `python3 -c PROGRAM OP ARGS`.

Ops on one Hugging Face repo dir (<hf_cache>/hub/models--org--name):
  manifest REPO REVISION [lazy|deep] -> JSON {commit, files: {rel: [sha256|null, size, blob|null]},
                                   broken, outside, marker}
  probe REPO [deep]  (stdin JSON {commit, paths}) -> {hashes: {dest: [sha256, size]|null}, free, marker}
  recv, finish: the receiving side, in recv.py
Every name written is checked against the HF cache layout (see `dest_path`): no `..`, no absolute
path, no symlink leading out of the repo; a source symlink pointing outside is refused.

Hashes are cached by (size, mtime_ns, inode, device): rsync's "quick check". A changed file that
keeps all four (an in-place edit with its mtime restored) passes it; `deep` rehashes every byte.
The cache lives in ~/.cache/sparkctl/hashes on the node, outside the HF cache that containers mount.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import re
import stat

PART = ".sparkctl-part"
STATE = ".sparkctl"
CHUNK = 1 << 20
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
BLOB_RE = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")  # git sha1 or LFS sha256
REVISION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")


def big_pipe(fd):
    """1 MiB instead of 64 KiB in flight: 16x fewer wake-ups of writer and reader per byte, which
    counts when they share few cores (the kernel caps it at pipe-max-size; best effort)."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, 1031, 1 << 20)  # F_SETPIPE_SZ


def manifest_digest(hashes):
    """Content digest of a snapshot: sha256 over sorted (path, file sha256) pairs."""
    h = hashlib.sha256()
    for rel in sorted(hashes):
        h.update(("%s\0%s\n" % (rel, hashes[rel])).encode())  # noqa: UP031 - runs on old pythons too
    return h.hexdigest()


def check_rel(rel):
    """A path relative to a snapshot: no empty, '.' or '..' part, not absolute, no NUL."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or "\0" in rel or any(p in ("", ".", "..") for p in parts):
        raise ValueError("unsafe name: %r" % (rel,))  # noqa: UP031
    if rel.endswith(PART):
        raise ValueError("reserved name: %r" % (rel,))  # noqa: UP031
    return rel


def check_revision(revision):
    if not REVISION_RE.match(revision) or ".." in revision.split("/") or revision.endswith(PART):
        raise ValueError("unsafe revision: %r" % (revision,))  # noqa: UP031
    return revision


def dest_path(repo, dest):
    """`blobs/<blob>` or `snapshots/<commit>/<rel>` -> absolute path, only if it stays in the repo
    (also through symlinked directories already on disk)."""
    kind, _, rest = dest.partition("/")
    if kind == "blobs" and BLOB_RE.match(rest):
        pass
    elif kind == "snapshots" and COMMIT_RE.match(rest.partition("/")[0]):
        check_rel(rest.partition("/")[2])
    else:
        raise ValueError("unsafe name: %r" % (dest,))  # noqa: UP031
    path = os.path.join(repo, dest)
    parent = os.path.realpath(os.path.dirname(path))
    if not (parent + "/").startswith(os.path.realpath(repo) + "/"):
        raise ValueError("%r leads out of the cache through a symlink" % (dest,))  # noqa: UP031
    return path


def open_dir(repo, rel_dir, create=False):
    """A descriptor of repo/rel_dir, walked one component at a time from the repo's own descriptor
    with O_NOFOLLOW: a directory swapped for a symlink (a container mounts the cache read-write)
    fails here with ELOOP/ENOTDIR instead of leading the walk elsewhere. `create`: mkdir on the way
    (the repo dir itself too: the path up to it is the profile's hf_cache, the node user's choice)."""
    if create:
        os.makedirs(repo, exist_ok=True)
    fd = os.open(repo, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in rel_dir.split("/") if rel_dir else []:
            if part in ("", ".", ".."):
                raise ValueError("unsafe name: %r" % (rel_dir,))  # noqa: UP031
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = sub
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(repo, rel):
    """repo/rel for reading, never through a symlink (any component); only a regular file."""
    head, _, name = rel.rpartition("/")
    dfd = open_dir(repo, head)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dfd)
    finally:
        os.close(dfd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError("%r is not a regular file" % (rel,))  # noqa: UP031
    return fd


def write_file(repo, rel, data, mode):
    """repo/rel = data (refs, the completion marker): a part file created exclusively (O_EXCL,
    O_NOFOLLOW) in a directory walked by descriptor, its mode set on the descriptor, then renamed
    within that directory. A symlink planted under either name is replaced, never written through."""
    head, _, name = rel.rpartition("/")
    dfd = open_dir(repo, head, create=True)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name + PART, dir_fd=dfd)
        fd = os.open(name + PART, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dfd)
        try:
            os.fchmod(fd, mode)
            view = memoryview(data.encode())
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(name + PART, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    finally:
        os.close(dfd)


def cache_file(repo):
    """Per repo and device, in the node user's home: containers never mount it."""
    st = os.stat(repo) if os.path.isdir(repo) else None
    key = "%s\0%s" % (os.path.realpath(repo), st.st_dev if st else "")  # noqa: UP031
    name = hashlib.sha256(key.encode()).hexdigest()[:32] + ".json"
    return os.path.join(os.path.expanduser("~"), ".cache", "sparkctl", "hashes", name)


class HashCache:
    def __init__(self, repo, deep=False):
        self.path = cache_file(repo)
        hf_root = os.path.dirname(os.path.dirname(os.path.realpath(repo))) + "/"
        if os.path.realpath(self.path).startswith(hf_root):
            self.path = None  # inside the cache the container mounts: never trusted, never written
        self.deep = deep
        self.dirty = False
        try:
            with open(self.path) as fh:
                self.data = json.load(fh)
        except (OSError, ValueError, TypeError):
            self.data = {}

    @staticmethod
    def _stamp(st):
        return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev]

    def record(self, rel, st, digest):
        self.data[rel] = self._stamp(st) + [digest]
        self.dirty = True

    def cached(self, rel, real):
        st = os.stat(real)
        hit = self.data.get(rel)
        if not self.deep and hit and hit[:4] == self._stamp(st):
            return hit[4], st.st_size
        return None, st.st_size

    def sha256(self, rel, real):
        digest, size = self.cached(rel, real)
        if digest:
            return digest, size
        st = os.stat(real)
        h = hashlib.sha256()
        with open(real, "rb") as fh:
            for block in iter(lambda: fh.read(CHUNK), b""):
                h.update(block)
        self.record(rel, st, h.hexdigest())
        return h.hexdigest(), st.st_size

    def save(self):
        if not self.dirty or self.path is None:
            return
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        tmp = "%s.%d%s" % (self.path, os.getpid(), PART)  # noqa: UP031 - concurrent runs on one node
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(self.data, fh)
        os.replace(tmp, self.path)
        self.dirty = False


def cache_key(repo, path, blob):
    """Cache key of a snapshot file: its blob, or its own path for a plain file."""
    return "blobs/" + blob if blob else os.path.relpath(path, repo)


def resolve_commit(repo, revision):
    """A full commit, a ref (branch/tag), or a unique short commit prefix (>= 7 hex), as preflight does."""
    if COMMIT_RE.match(revision):
        return revision
    try:
        with open(os.path.join(repo, "refs", check_revision(revision))) as fh:
            commit = fh.read().strip()
        return commit if COMMIT_RE.match(commit) else None
    except (OSError, ValueError):
        pass
    if re.match(r"^[0-9a-f]{7,39}$", revision):
        try:
            found = [c for c in os.listdir(os.path.join(repo, "snapshots")) if c.startswith(revision)]
        except OSError:
            found = []
        if len(found) == 1 and COMMIT_RE.match(found[0]):
            return found[0]
    return None


def marker_path(repo, commit):
    return os.path.join(repo, STATE, commit + ".complete")


def _read_marker(repo, commit):
    try:
        with open(marker_path(repo, commit)) as fh:
            return fh.read().strip()
    except OSError:
        return None


def walk_snapshot(repo, snap):
    """(rel, path, real, blob) per file; real is None for a dangling link, "" for one leading out."""
    root_real = os.path.realpath(repo) + "/"
    blobs = os.path.realpath(os.path.join(repo, "blobs"))
    for root, dirs, files in os.walk(snap):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(PART):
                continue
            path = os.path.join(root, name)
            real = os.path.realpath(path)
            if not real.startswith(root_real):
                yield os.path.relpath(path, snap), path, "", None
                continue
            if not os.path.isfile(real):
                yield os.path.relpath(path, snap), path, None, None
                continue
            blob = os.path.basename(real) if os.path.dirname(real) == blobs else None
            yield os.path.relpath(path, snap), path, real, blob


def refs_to(repo, commit):
    """The refs (branches, tags: refs/<name>) that name `commit`: what a start naming only `<id>` resolves.
    Byte for byte, as huggingface_hub reads a ref (unstripped): one holding `commit` and a newline
    names no snapshot offline, so a peer with it is repaired, not skipped."""
    found = []
    top = os.path.join(repo, "refs")
    for root, _dirs, files in os.walk(top):
        for name in files:
            path = os.path.join(root, name)
            try:
                with open(path) as fh:
                    if fh.read() == commit and not name.endswith(PART):
                        found.append(os.path.relpath(path, top))
            except OSError:
                continue
    return sorted(found)


def op_manifest(repo, revision, mode=""):
    out = {"commit": None, "files": {}, "broken": [], "outside": [], "marker": None, "refs": []}
    commit = resolve_commit(repo, revision)
    snap = os.path.join(repo, "snapshots", commit or "")
    if not commit or not os.path.isdir(snap):
        return out
    out["commit"] = commit
    out["refs"] = refs_to(repo, commit)
    out["marker"] = _read_marker(repo, commit)
    cache = HashCache(repo, deep=mode == "deep")
    for rel, path, real, blob in walk_snapshot(repo, snap):
        if real == "":
            out["outside"].append([rel, os.path.realpath(path)])
        elif real is None:
            out["broken"].append(rel)
        else:
            lookup = cache.cached if mode == "lazy" else cache.sha256
            digest, size = lookup(cache_key(repo, path, blob), real)
            out["files"][rel] = [digest, size, blob]
    cache.save()
    return out


def free_bytes(path):
    while not os.path.isdir(path):
        path = os.path.dirname(path)
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def op_probe(repo, req, deep=False):
    cache = HashCache(repo, deep=deep)
    hashes = {}
    for dest in req["paths"]:
        path = dest_path(repo, dest)
        ok = os.path.isfile(path) and not os.path.islink(path)
        hashes[dest] = list(cache.sha256(dest, path)) if ok else None
    cache.save()
    marker = _read_marker(repo, req["commit"]) if req.get("commit") else None
    refs = refs_to(repo, req["commit"]) if req.get("commit") else []
    return {"hashes": hashes, "free": free_bytes(repo), "marker": marker, "refs": refs}


def frame(doc):
    """One header line of a file stream: {"path", "size"[, "offset", "total"]}, then `size` bytes."""
    return (json.dumps(doc) + "\n").encode()
