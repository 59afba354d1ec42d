"""Runs ON a node (python3 stdlib only), last of the node program's files (node/pack.py FILES): the
state of a node in one round trip, the source side of a transfer straight to a peer over system
OpenSSH (the image's in push_image.py), and the program's entry point.

  state   (stdin JSON {image, want, models: [[repo, revision]], mode}) -> image ID/layers/free space
          and a manifest per model, in one run (what `ship` compares); `want`: see image_state
  push-image    (stdin: one JSON line {ref, diff_ids, skip, chain, codec, threads}) -> `docker save
                REF` from the engine socket (docker_api.SaveStream), minus the layers the peers have,
                into `ssh PEER ... load` (load.py) (the socket itself is ssh's stdin when nothing is
                dropped); codec "zstd": through `zstd -1` on the way (load.py decompresses)
  push-weights  (stdin: one JSON line {repo, streams, ranged, chain, finish}) -> each stream a `recv`
                on the peer through its own ssh, fed files or ranges of large files, each hashed
                here as it is read; a stream's end line carries those sha256 (and, the first
                stream's, `finish` for its receiver)
A push prints {"progress": bytes} lines, then {"result": ...}. Its stdin stays open: when it closes
(sparkctl was interrupted or lost the node) every child is killed at once, and a child also dies
with its parent (PR_SET_PDEATHSIG), so no transfer outlives the command that started it.
"""

import contextlib
import hashlib
import json
import os
import sys
import threading

from .base import (  # node: strip
    CHUNK,
    HashCache,
    dest_path,
    frame,
    free_bytes,
    op_manifest,
    open_file,
)
from .children import Meter, kill_children, spawn  # node: strip
from .docker_api import image_state  # node: strip
from .load import op_load  # node: strip
from .push_image import op_push_image  # node: strip
from .recv import weights_op  # node: strip
from .relay import Sink, first_hop, flatten, last_json, op_relay  # node: strip


def _watch_stdin():
    """The controller keeps our stdin open for the whole push; EOF means stop now."""

    def watch():
        with contextlib.suppress(OSError, ValueError):
            while sys.stdin.buffer.read(1 << 16):
                pass
        kill_children()
        os._exit(130)

    threading.Thread(target=watch, daemon=True).start()


def has_program(name):
    """On PATH as this login's commands see it (what the push and the peer's `load` will run)."""
    dirs = os.environ.get("PATH", os.defpath).split(os.pathsep)
    return any(d and os.access(os.path.join(d, name), os.X_OK) for d in dirs)


def op_state(req):
    out = {"image": None, "models": {}, "cores": os.cpu_count() or 1, "load": 0.0}
    out["zstd"] = has_program("zstd")  # the image may go compressed when every end of a push has it
    with contextlib.suppress(OSError, AttributeError):
        out["load"] = os.getloadavg()[0]  # what else runs there: weights streams leave it room
    t = None
    if req.get("image"):
        want = req.get("want")
        t = threading.Thread(target=lambda: out.__setitem__("image", image_state(req["image"], want)))
        t.start()
    for repo, revision in req.get("models", []):
        try:
            doc = op_manifest(repo, revision, req.get("mode", "lazy"))
        except (OSError, ValueError) as exc:
            doc = {"commit": None, "files": {}, "error": str(exc)}
        doc["free"], doc["exists"] = free_bytes(repo), os.path.isdir(repo)
        out["models"][repo] = doc
    if t is not None:
        t.join()
    return out


def _send_stream(repo, items, sink, meter, hashes, errors, trailer=None, pieces=None):
    """One stream: header + bytes per whole file or range, each hashed on the way (a range's sha256
    into `pieces`: the peer checks its ranges against them instead of reading the file again),
    then the end line: the sha256 of every file and range of this stream (the receivers record
    them: the bytes are hashed once, here, from the very buffer that is sent) and, for the first
    stream, what `trailer()` adds for its receiver to finish."""
    view = memoryview(bytearray(CHUNK))
    sent, sent_pieces = {}, {}
    try:
        for dest, offset, length in items:
            dest_path(repo, dest)  # the name's own rules; opened by descriptor walk, O_NOFOLLOW:
            # a blob swapped for a symlink after the manifest (to the node user's key...) is refused
            with os.fdopen(open_file(repo, dest), "rb", buffering=0) as fh:
                st = os.fstat(fh.fileno())
                whole = offset is None
                head = {"path": dest, "size": st.st_size if whole else length}
                if not whole:
                    head["offset"], head["total"] = offset, st.st_size
                    fh.seek(offset)
                sink.write(frame(head))
                h, left = hashlib.sha256(), head["size"]
                while left and sink.alive:
                    n = fh.readinto(view[: min(CHUNK, left)])
                    if not n:
                        raise EOFError(dest + " shrank while being sent")
                    h.update(view[:n])
                    sink.write(view[:n])
                    meter.add(n)
                    left -= n
                if left:
                    continue  # the sink is gone: nothing more of this stream arrives anywhere
                digest = h.hexdigest()
                if whole:
                    hashes[dest], sent[dest] = (st, digest), digest
                else:
                    sent_pieces.setdefault(dest, {})[str(offset)] = digest
                    if pieces is not None:
                        pieces.setdefault(dest, {})[str(offset)] = [length, digest]
        # This stream's own (the shared dicts are still being filled by the other streams' threads).
        end = {"end": True, "sent": sent, "pieces": sent_pieces}
        if trailer is not None and sink.alive:
            end.update(trailer())
        sink.write(frame(end))
    except (OSError, EOFError, ValueError) as exc:
        errors.append(str(exc))


def _finish_doc(req, hashes, ranged, errors, others, sinks, pieces=None):
    """Stream 0's trailer, once every other stream has ended: the plan with every sha256 now known
    and what the other streams' receivers wrote (their own hashes), per peer. The receiver of
    stream 0 then finishes the snapshot itself, saving sparkctl a round trip to the peer."""
    for t in others:
        t.join()
    plan = req.get("finish")
    if plan is None or errors:
        return {}
    known = dict(ranged, **{d: v[1] for d, v in hashes.items()})
    files = {}
    for rel, (sha, size, blob) in plan["files"].items():
        dest = "blobs/" + blob if blob else "snapshots/%s/%s" % (plan["commit"], rel)  # noqa: UP031
        files[rel] = [sha or known.get(dest), size, blob]
    written, got = {}, {}
    for sink in sinks:
        for node, res in flatten(sink.close()).items():
            if res["rc"] == 0:
                doc = last_json(res["out"])
                written.setdefault(node, {}).update(doc.get("written", {}))
                for dest, by_offset in doc.get("pieces", {}).items():
                    got.setdefault(node, {}).setdefault(dest, {}).update(by_offset)
    fin = {"plan": dict(plan, files=files), "ranged": ranged, "written": written}
    return {"finish": dict(fin, pieces=pieces or {}, got=got)}


def op_push_weights(req):
    repo, meter, hashes, errors, pieces = req["repo"], Meter(), {}, [], {}
    sinks, threads = [], []
    for _items in req["streams"]:
        argv, line = first_hop(req["chain"], req["prog"])
        sinks.append(Sink(req["chain"][0]["node"], argv, line, spawn))
    ranged = dict(req.get("ranged", {}))
    for i, items in enumerate(req["streams"][1:], 1):
        threads.append(meter.run(_send_stream, repo, items, sinks[i], meter, hashes, errors, None, pieces))
    todo = [d for d, sha in ranged.items() if not sha]

    def hash_ranged():
        cache = HashCache(repo)
        for dest in todo:
            dest_path(repo, dest)
            fd = open_file(repo, dest)  # a regular file, reached through no symlink
            try:
                ranged[dest] = cache.sha256(dest, "/proc/self/fd/%d" % fd)[0]  # noqa: UP031
            finally:
                os.close(fd)
        cache.save()

    if todo:
        threads.append(meter.run(hash_ranged))
    others = list(threads)
    threads.append(
        meter.run(
            _send_stream,
            repo,
            req["streams"][0],
            sinks[0],
            meter,
            hashes,
            errors,
            lambda: _finish_doc(req, hashes, ranged, errors, others, sinks[1:], pieces),
            pieces,
        )
    )
    meter.report_until(lambda: not any(t.is_alive() for t in threads))
    streams = [flatten(sink.close()) for sink in sinks]
    cache = HashCache(repo)
    for dest, (st, digest) in hashes.items():
        cache.record(dest, st, digest)
    cache.save()
    return {
        "streams": streams,
        "errors": errors,
        "bytes": meter.n,
        "hashes": {d: v[1] for d, v in hashes.items()},
        "ranged": ranged,
    }


def main(argv):
    op, args = argv[0], argv[1:]
    if op in ("push-image", "push-weights"):
        req = json.loads(sys.stdin.buffer.readline())
        _watch_stdin()
        try:
            result = op_push_image(req) if op == "push-image" else op_push_weights(req)
        except Exception as exc:  # noqa: BLE001 - reported to sparkctl as this node's failure
            result = {"crash": "%s: %s" % (type(exc).__name__, exc)}  # noqa: UP031
        finally:
            kill_children()
        sys.stdout.write(json.dumps({"result": result}) + "\n")
        sys.stdout.flush()
        os._exit(0)  # the stdin watcher is still reading
    if op == "load":
        op_load(*args)
        return
    if op == "relay":  # started by BOOT, which read the header line
        result = op_relay(globals()["HEAD"], spawn)
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()
        os._exit(0)
    result = op_state(json.load(sys.stdin)) if op == "state" else weights_op(op, args)
    if result is None:
        raise SystemExit("unknown op " + op)
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
