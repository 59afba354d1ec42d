"""Runs ON a node (python3 stdlib only), sent verbatim as `python3 -c <this file> OP ARGS...`.

Ops on one Hugging Face repo dir (<hf_cache>/hub/models--org--name):
  manifest REPO REVISION [lazy] -> JSON {commit, files: {rel: [sha256|null, size, blob|null]},
                                   broken, marker}; `lazy` reports only cached hashes (null otherwise)
  probe REPO   (stdin JSON {commit, paths}) -> JSON {hashes: {path: [sha256, size]|null}, free, marker}
  send REPO    (stdin JSON {paths}) -> on stdout, per file a header line {"path", "size"} and its
               bytes, then an end line {"end": true, "hashes"} with the sha256s computed while
               sending (and cached)
  recv REPO    (stdin: a plan line {"plan": {commit, revision, files}}, then send's output) -> each
               file under a temp name, renamed once complete; then snapshot links, verification of
               every file against the plan, refs/<revision>, and the completion marker last.
The framing is line-delimited JSON headers plus raw bytes: no tar parsing, no extra copies.
sha256s are cached in REPO/.sparkctl/hashes.json by (size, mtime_ns, inode): computed once.
Paths are relative to REPO and checked to stay inside it. Also imported by sparkctl itself
(`manifest_digest`), so the digest has one definition.
"""

import contextlib
import errno
import hashlib
import json
import os
import re
import sys

PART = ".sparkctl-part"
STATE = ".sparkctl"
CHUNK = 1 << 20
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")


def manifest_digest(hashes):
    """Content digest of a snapshot: sha256 over sorted (path, file sha256) pairs."""
    h = hashlib.sha256()
    for rel in sorted(hashes):
        h.update(("%s\0%s\n" % (rel, hashes[rel])).encode())  # noqa: UP031 - runs on old pythons too
    return h.hexdigest()


def _safe(repo, rel):
    norm = os.path.normpath(rel)
    if (
        os.path.isabs(norm)
        or norm.startswith("..")
        or not (norm.startswith("blobs/") or norm.startswith("snapshots/"))
    ):
        raise ValueError("unsafe path: {!r}".format(rel))  # noqa: UP032
    return os.path.join(repo, norm)


class HashCache:
    def __init__(self, repo):
        self.path = os.path.join(repo, STATE, "hashes.json")
        self.dirty = False
        try:
            with open(self.path) as fh:
                self.data = json.load(fh)
        except (OSError, ValueError):
            self.data = {}

    def record(self, rel, st, digest):
        self.data[rel] = [st.st_size, st.st_mtime_ns, st.st_ino, digest]
        self.dirty = True

    def cached(self, rel, real):
        st = os.stat(real)
        hit = self.data.get(rel)
        if hit and hit[:3] == [st.st_size, st.st_mtime_ns, st.st_ino]:
            return hit[3], st.st_size
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
        if not self.dirty:
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = "%s.%d%s" % (self.path, os.getpid(), PART)  # noqa: UP031 - concurrent runs on one node
        with open(tmp, "w") as fh:
            json.dump(self.data, fh)
        os.replace(tmp, self.path)
        self.dirty = False


def _key(repo, path, blob):
    """Cache key of a snapshot file: its blob, or its own path for a plain file."""
    return "blobs/" + blob if blob else os.path.relpath(path, repo)


def resolve_commit(repo, revision):
    """A full commit, a ref (branch/tag), or a unique short commit prefix (>= 7 hex), as preflight does."""
    if COMMIT_RE.match(revision):
        return revision
    try:
        with open(os.path.join(repo, "refs", revision)) as fh:
            return fh.read().strip()
    except OSError:
        pass
    if re.match(r"^[0-9a-f]{7,39}$", revision):
        try:
            found = [c for c in os.listdir(os.path.join(repo, "snapshots")) if c.startswith(revision)]
        except OSError:
            found = []
        if len(found) == 1:
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


def _walk_snapshot(repo, snap):
    """(rel, path, real, blob) per file of a snapshot; real is None for a dangling link."""
    blobs = os.path.realpath(os.path.join(repo, "blobs"))
    for root, dirs, files in os.walk(snap):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(PART):
                continue
            path = os.path.join(root, name)
            real = os.path.realpath(path)
            if not os.path.isfile(real):
                yield os.path.relpath(path, snap), path, None, None
                continue
            blob = os.path.basename(real) if os.path.dirname(real) == blobs else None
            yield os.path.relpath(path, snap), path, real, blob


def op_manifest(repo, revision, lazy=False):
    out = {"commit": None, "files": {}, "broken": [], "marker": None}
    commit = resolve_commit(repo, revision)
    snap = os.path.join(repo, "snapshots", commit or "")
    if not commit or not os.path.isdir(snap):
        return out
    out["commit"] = commit
    out["marker"] = _read_marker(repo, commit)
    cache = HashCache(repo)
    for rel, path, real, blob in _walk_snapshot(repo, snap):
        if real is None:
            out["broken"].append(rel)
            continue
        lookup = cache.cached if lazy else cache.sha256
        digest, size = lookup(_key(repo, path, blob), real)
        out["files"][rel] = [digest, size, blob]
    cache.save()
    return out


def op_probe(repo, req):
    cache = HashCache(repo)
    hashes = {}
    for rel in req["paths"]:
        path = _safe(repo, rel)
        ok = os.path.isfile(path) and not os.path.islink(path)
        hashes[rel] = list(cache.sha256(rel, path)) if ok else None
    cache.save()
    probe_dir = repo
    while not os.path.isdir(probe_dir):
        probe_dir = os.path.dirname(probe_dir)
    st = os.statvfs(probe_dir)
    marker = _read_marker(repo, req["commit"]) if req.get("commit") else None
    return {"hashes": hashes, "free": st.f_bavail * st.f_frsize, "marker": marker}


def frame(doc):
    """One header line of the send/recv stream."""
    return (json.dumps(doc) + "\n").encode()


def op_send(repo, req):
    out = sys.stdout.buffer
    cache = HashCache(repo)
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    sent = {}
    for rel in req["paths"]:
        real = os.path.realpath(_safe(repo, rel))
        with open(real, "rb", buffering=0) as fh:
            st = os.fstat(fh.fileno())
            out.write(frame({"path": rel, "size": st.st_size}))
            h = hashlib.sha256()
            left = st.st_size
            while left:
                n = fh.readinto(view[: min(CHUNK, left)])
                if not n:
                    raise EOFError(rel + " shrank while being sent")
                h.update(view[:n])
                out.write(view[:n])
                left -= n
        sent[rel] = h.hexdigest()
        cache.record(rel, st, sent[rel])
    out.write(frame({"end": True, "hashes": sent}))
    out.flush()
    cache.save()


def _clean_parts(repo, commit):
    for top in ("blobs", os.path.join("snapshots", commit)):
        for root, _dirs, files in os.walk(os.path.join(repo, top)):
            for name in files:
                if name.endswith(PART):
                    os.unlink(os.path.join(root, name))


def _header(inp):
    line = inp.readline()
    if not line.endswith(b"\n"):
        raise EOFError("stream ended")
    return json.loads(line)


def op_recv(repo):
    inp = sys.stdin.buffer
    cache = HashCache(repo)
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    written, total, tmp = {}, 0, None
    try:
        plan = _header(inp)["plan"]
        # Whatever happens next, this snapshot no longer looks complete.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(marker_path(repo, plan["commit"]))
        _clean_parts(repo, plan["commit"])
        while True:
            head = _header(inp)
            if head.get("end"):
                sent_hashes = head.get("hashes", {})
                break
            dest = _safe(repo, head["path"])
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            tmp = dest + PART
            h = hashlib.sha256()
            with open(tmp, "wb", buffering=0) as fh:
                left = head["size"]
                while left:
                    n = inp.readinto(view[: min(CHUNK, left)])
                    if not n:
                        raise EOFError("stream ended inside " + head["path"])
                    h.update(view[:n])
                    fh.write(view[:n])
                    left -= n
                os.fsync(fh.fileno())
            os.replace(tmp, dest)
            tmp = None
            cache.record(os.path.normpath(head["path"]), os.stat(dest), h.hexdigest())
            written[head["path"]] = h.hexdigest()
            total += head["size"]
    except OSError as exc:
        _abort(tmp, cache)
        code = "enospc" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "oserror"
        _fail({"error": code, "message": str(exc), "written": len(written)}, 28 if code == "enospc" else 1)
    except (EOFError, ValueError, KeyError) as exc:
        _abort(tmp, cache)
        _fail({"error": "truncated", "message": str(exc), "written": len(written)}, 3)
    cache.save()
    result = finish(repo, plan, sent_hashes, cache)
    result.update({"bytes": total, "files_written": len(written)})
    return result


def _abort(tmp, cache):
    if tmp:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    with contextlib.suppress(OSError):
        cache.save()


def _fail(doc, rc):
    sys.stderr.write(json.dumps(doc) + "\n")
    sys.exit(rc)


def finish(repo, plan, sent_hashes, cache):
    """Links, then verify every file against the source's sha256, then refs, then the marker."""
    commit, revision = plan["commit"], plan["revision"]
    files = plan["files"]
    want = {}
    for rel, (sha, _size, blob) in files.items():
        dest = "blobs/" + blob if blob else "snapshots/%s/%s" % (commit, rel)  # noqa: UP031
        want[rel] = sha or sent_hashes.get(dest)
        if not blob:
            continue
        link = _safe(repo, os.path.join("snapshots", commit, rel))
        target = os.path.relpath(os.path.join(repo, "blobs", blob), os.path.dirname(link))
        if os.path.islink(link) and os.readlink(link) == target:
            continue
        os.makedirs(os.path.dirname(link), exist_ok=True)
        tmp = link + PART
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(target, tmp)
        os.replace(tmp, link)
    got = {}
    for rel, path, real, blob in _walk_snapshot(repo, os.path.join(repo, "snapshots", commit)):
        if real is not None:
            got[rel] = cache.sha256(_key(repo, path, blob), real)[0]
    cache.save()
    bad = sorted(rel for rel in want if not want[rel] or got.get(rel) != want[rel])
    extra = sorted(set(got) - set(want))
    if bad:
        return {"ok": False, "mismatch": bad, "extra": extra, "hashes": want, "digest": None}
    digest = manifest_digest(want)
    if revision != commit:
        ref = os.path.join(repo, "refs", revision)
        os.makedirs(os.path.dirname(ref), exist_ok=True)
        with open(ref + PART, "w") as fh:
            fh.write(commit)
        os.replace(ref + PART, ref)
    marker = marker_path(repo, commit)
    os.makedirs(os.path.dirname(marker), exist_ok=True)
    with open(marker + PART, "w") as fh:  # the very last write: the snapshot is now complete
        fh.write(digest + "\n")
    os.replace(marker + PART, marker)
    return {"ok": True, "mismatch": [], "extra": extra, "hashes": want, "digest": digest}


def main(argv):
    op, repo = argv[0], argv[1]
    if op == "manifest":
        result = op_manifest(repo, argv[2], lazy=argv[3:] == ["lazy"])
    elif op == "probe":
        result = op_probe(repo, json.load(sys.stdin))
    elif op == "send":
        op_send(repo, json.load(sys.stdin))
        return
    elif op == "recv":
        result = op_recv(repo)
    else:
        raise SystemExit("unknown op " + op)
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
