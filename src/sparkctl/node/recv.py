"""Runs ON a node (python3 stdlib only), part of the node program: the receiving side of weights.

  recv REPO [COMMIT [NODE [verify]]] (stdin: framed files, see `frame`) -> first drops COMMIT's
                     completion marker (before any byte is written); each whole file under a part
                     name, renamed once complete; ranges of a large file go into its part file in
                     place. The bytes go pipe -> file by splice, not through Python, and are hashed
                     once, by the source as it reads them (every hop an SSH channel whose AEAD
                     cipher authenticates each packet): a file's sha256 is the one the stream's end
                     line gives. `verify` (ship --verify): hashed here on arrival too, recorded as
                     this node's own.
  finish REPO        (stdin JSON {plan, written, ranged[, pieces, got]}) -> ranged files checked
                     (by their ranges' sha256 when they tile the file, else whole) and renamed, snapshot
                     links, every file verified against the plan, refs/<revision>, the marker last;
                     part files left by an interrupted run removed
Every name written goes through `dest_path`/`check_rel`: no `..`, no absolute path, no symlink
leading out of the repo, part files opened with O_NOFOLLOW.
"""

import contextlib
import errno
import hashlib
import json
import os
import stat
import sys

from .base import (  # node: strip
    CHUNK,
    COMMIT_RE,
    PART,
    HashCache,
    big_pipe,
    cache_key,
    check_rel,
    check_revision,
    dest_path,
    manifest_digest,
    marker_path,
    op_manifest,
    op_probe,
    open_dir,
    open_file,
    walk_snapshot,
    write_file,
)
from .stream_in import Reader  # node: strip

FINAL_MODE = 0o644  # what `huggingface-cli download` leaves under a 022 umask: the container reads it


def _drop_marker(repo, commit):
    """Whatever happens next, this snapshot no longer looks complete."""
    if not COMMIT_RE.match(commit):
        raise ValueError("unsafe commit: %r" % (commit,))  # noqa: UP031
    with contextlib.suppress(FileNotFoundError):
        os.unlink(marker_path(repo, commit))


def _drop_parts(repo, commit):
    """Part files left by an interrupted run (every stream has ended when `finish` runs)."""
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


def _open_part(repo, dest, total):
    """(directory descriptor, part descriptor, name) of dest's part file, never through a symlink
    someone planted under that name or in place of a directory on the way (walked by descriptor).
    A ranged one (total = the whole file's size) is shared by several streams: sized, never
    truncated by one of them (a leftover of another version gets every range rewritten and is
    checked whole in `finish`); a whole one is created exclusively."""
    head, _, name = dest.rpartition("/")
    dfd = open_dir(repo, head, create=True)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW
        if total is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name + PART, dir_fd=dfd)
            flags |= os.O_EXCL
        fd = os.open(name + PART, flags, 0o600, dir_fd=dfd)  # others read it only once complete
    except BaseException:
        os.close(dfd)
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        os.close(dfd)
        raise ValueError("%r is not a regular file" % (dest + PART,))  # noqa: UP031
    if total is not None and os.fstat(fd).st_size != total:
        os.ftruncate(fd, total)
    return dfd, fd, name


def _recv_one(inp, repo, head, view, verify):
    """One file or range into its part file; its sha256 when `verify` (else None: the source's,
    from the stream's end line)."""
    dest_path(repo, head["path"])  # the name's own rules (layout, no `..`)
    ranged = "offset" in head
    dfd, fd, name = _open_part(repo, head["path"], int(head["total"]) if ranged and "total" in head else None)
    h = hashlib.sha256() if verify else None
    try:
        if ranged:
            os.lseek(fd, int(head["offset"]), os.SEEK_SET)
        try:
            inp.copy(fd, int(head["size"]), view, h)
        except EOFError:
            raise EOFError("stream ended inside " + head["path"]) from None
        digest = h.hexdigest() if h is not None else None
        if ranged:
            return digest  # this range's: `finish` compares it with the source's
        os.fchmod(fd, FINAL_MODE)  # on the descriptor: the file written, not whatever the name is now
        os.close(fd)
        fd = None
        os.replace(name + PART, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        if not ranged:
            with contextlib.suppress(OSError):
                os.unlink(name + PART, dir_fd=dfd)
        raise
    finally:
        if fd is not None:
            os.close(fd)
        os.close(dfd)
    return digest


def _source_digests(head, written, pieces):
    """The sha256 the source computed of each file and range this stream carried (its end line),
    for those not hashed here; one missing stays None, which `finish` takes as a mismatch."""
    sent, sent_pieces = head.get("sent") or {}, head.get("pieces") or {}
    for dest, digest in written.items():
        if digest is None:
            written[dest] = sent.get(dest)
    for dest, by_offset in pieces.items():
        for offset, digest in by_offset.items():
            if digest is None:
                by_offset[offset] = sent_pieces.get(dest, {}).get(offset)


def op_recv(repo, commit=None, node=None, mode=None):
    """Receive one stream; the first stream's end line may carry `finish` (plan, ranged, what the
    other streams wrote per node): then this receiver finishes the snapshot too."""
    big_pipe(0)
    inp, verify = Reader(0), mode == "verify"
    view = memoryview(bytearray(CHUNK))
    written, pieces, total, done = {}, {}, 0, None
    try:
        if commit:
            _drop_marker(repo, commit)
        while True:
            head = _header(inp)
            if head.get("end"):
                _source_digests(head, written, pieces)
                fin = head.get("finish")
                if fin is not None:
                    done = op_finish(repo, _finish_req(fin, node, written, pieces))
                break
            digest = _recv_one(inp, repo, head, view, verify)
            if "offset" in head:
                pieces.setdefault(head["path"], {})[str(head["offset"])] = digest
            else:
                written[head["path"]] = digest
            total += int(head["size"])
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a symlink where a file or directory belongs
            _fail({"error": "unsafe", "message": "symlink refused: %s" % exc, "written": len(written)}, 4)  # noqa: UP031
        code = "enospc" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "oserror"
        _fail({"error": code, "message": str(exc), "written": len(written)}, 28 if code == "enospc" else 1)
    except ValueError as exc:
        _fail({"error": "unsafe", "message": str(exc), "written": len(written)}, 4)
    except (EOFError, KeyError) as exc:
        _fail({"error": "truncated", "message": str(exc), "written": len(written)}, 3)
    return {"written": written, "pieces": pieces, "bytes": total, "finish": done}


def _finish_req(fin, node, written, pieces):
    """`finish`'s request from stream 0's end line: what this node's other receivers wrote (files,
    and the sha256 of each range) joined with this receiver's own."""
    got = {dest: dict(by_offset) for dest, by_offset in fin.get("got", {}).get(node or "", {}).items()}
    for dest, by_offset in pieces.items():
        got.setdefault(dest, {}).update(by_offset)
    mine = dict(fin["written"].get(node or "", {}), **written)
    req = {"plan": fin["plan"], "written": mine, "ranged": fin["ranged"]}
    return dict(req, pieces=fin.get("pieces") or {}, got=got)


def _fail(doc, rc):
    sys.stderr.write(json.dumps(doc) + "\n")
    sys.exit(rc)


def _tiled(sent, got, size):
    """Every range of the file arrived with the sha256 the source read, and together they cover
    [0, size) exactly: the part holds the source's bytes, with no second read of it."""
    if not sent or set(sent) != set(got or {}):
        return False
    at = 0
    for offset, (length, sha) in sorted(((int(k), v) for k, v in sent.items()), key=lambda kv: kv[0]):
        if offset != at or got[str(offset)] != sha:
            return False
        at += int(length)
    return at == size


def _settle_ranged(repo, ranged, cache, pieces=None, got=None):
    """Files sent in ranges: each range's sha256 must equal the one the source computed while
    sending it (ranges tiling the file), else the whole part must hash to the source's sha256 (a
    second read: an older sender, or a range missing); then it is renamed. One that fails is removed."""
    bad = []
    for dest, sha in ranged.items():
        path = dest_path(repo, dest)
        try:
            if sha and _tiled((pieces or {}).get(dest), (got or {}).get(dest), os.stat(path + PART).st_size):
                digest = sha
            else:
                digest, _size = HashCache(repo, deep=True).sha256(dest, path + PART)
        except OSError:
            digest = None
        if digest != sha:
            with contextlib.suppress(OSError):
                os.unlink(path + PART)
            bad.append(dest)
            continue
        _durable(repo, dest + PART, FINAL_MODE)
        head, _, name = dest.rpartition("/")
        dfd = open_dir(repo, head)
        try:
            os.replace(name + PART, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        finally:
            os.close(dfd)
        cache.record(dest, os.stat(path), sha)
    return bad


def _durable(repo, rel, mode=None):
    """fsync a received file (and set its mode, on the descriptor). `recv` renames a file once its
    bytes are in, without waiting for the disk (an fsync per file stops the stream while it lasts);
    `finish` makes each one durable before recording its hash and writing the marker, so after a
    power cut a file not yet on disk has no hash in the cache and no marker vouching for it: the
    next run rehashes it. Opened by descriptor walk, O_NOFOLLOW: never a planted symlink."""
    fd = open_file(repo, rel)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        os.fsync(fd)
    finally:
        os.close(fd)


def _link_blobs(repo, commit, files):
    for rel, (_sha, _size, blob) in files.items():
        if not blob:
            continue
        link = dest_path(repo, "snapshots/%s/%s" % (commit, rel))  # noqa: UP031
        target = os.path.relpath(dest_path(repo, "blobs/" + blob), os.path.dirname(link))
        if os.path.islink(link) and os.readlink(link) == target:
            continue
        head, _, name = ("snapshots/%s/%s" % (commit, rel)).rpartition("/")  # noqa: UP031
        dfd = open_dir(repo, head, create=True)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name + PART, dir_fd=dfd)
            os.symlink(target, name + PART, dir_fd=dfd)
            os.replace(name + PART, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        finally:
            os.close(dfd)


def _drop_bad(repo, commit, files, bad):
    """A received file that fails its hash is removed (its blob and its snapshot entry), never left
    looking like the model's bytes to the next run or to a container."""
    for rel in bad:
        entry = files.get(rel)
        dests = ["snapshots/%s/%s" % (commit, rel)]  # noqa: UP031
        if entry and entry[2]:
            dests.append("blobs/" + entry[2])
        for dest in dests:
            head, _, name = dest.rpartition("/")
            with contextlib.suppress(OSError, ValueError):
                dfd = open_dir(repo, head)
                try:
                    os.unlink(name, dir_fd=dfd)
                finally:
                    os.close(dfd)


def op_finish(repo, req):
    """Ranged files, links, verify every file against the plan, then refs, then the marker."""
    plan = req["plan"]
    commit, revision, files = plan["commit"], check_revision(plan["revision"]), plan["files"]
    if not COMMIT_RE.match(commit):
        raise ValueError("unsafe commit: %r" % (commit,))  # noqa: UP031
    for rel in files:
        check_rel(rel)
    cache = HashCache(repo)
    for dest, sha in req.get("written", {}).items():
        path = dest_path(repo, dest)
        _durable(repo, dest)  # on disk before its hash vouches for it (not per file mid-stream: no stall)
        cache.record(dest, os.stat(path), sha)  # hashed on arrival by `recv`
    bad_ranged = _settle_ranged(repo, req.get("ranged", {}), cache, req.get("pieces"), req.get("got"))
    _link_blobs(repo, commit, files)
    want = {rel: sha for rel, (sha, _size, _blob) in files.items()}
    got = {}
    for rel, path, real, blob in walk_snapshot(repo, os.path.join(repo, "snapshots", commit)):
        if real:
            got[rel] = cache.sha256(cache_key(repo, path, blob), real)[0]
    cache.save()
    bad = sorted(set(rel for rel in want if not want[rel] or got.get(rel) != want[rel]) | set(bad_ranged))
    extra = sorted(set(got) - set(want))
    _drop_parts(repo, commit)
    if bad:
        _drop_marker(repo, commit)
        _drop_bad(repo, commit, files, [rel for rel in bad if rel in files])
        return {"ok": False, "mismatch": bad, "extra": extra, "digest": None}
    digest = manifest_digest(want)
    # The source's refs to this commit too (refs/main of a pinned commit): the cache then resolves
    # `<id>` offline as the source's does. Each written whole (part file, rename), before the marker.
    for ref in sorted(set(plan.get("refs", [])) | ({revision} if revision != commit else set())):
        write_file(repo, "refs/" + check_revision(ref), commit, FINAL_MODE)
    # The very last write: the snapshot is now complete.
    write_file(repo, os.path.relpath(marker_path(repo, commit), repo), digest + "\n", FINAL_MODE)
    return {"ok": True, "mismatch": [], "extra": extra, "digest": digest}


def weights_op(op, args):
    """The weights ops; None when `op` is not one of them."""
    repo = args[0]
    if op == "manifest":
        return op_manifest(repo, args[1], args[2] if len(args) > 2 else "")
    if op == "probe":
        return op_probe(repo, json.load(sys.stdin), deep=args[1:] == ["deep"])
    if op == "recv":
        return op_recv(repo, *args[1:4])
    if op == "finish":
        return op_finish(repo, json.load(sys.stdin))
    return None
