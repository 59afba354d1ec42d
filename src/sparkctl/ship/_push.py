"""Runs ON a node (python3 stdlib only), after _node.py and tarfilter.py in one program: the state of
a node in one round trip, and the source side of a transfer straight to a peer over system OpenSSH.

  state   (stdin JSON {image, models: [[repo, revision]], mode}) -> image ID/layers/free space and a
          manifest per model, in one run (what `ship` compares)
  push-image    (stdin: one JSON line {ref, diff_ids, skip, hop}) -> `docker save REF`, minus the layers
                the peer has, piped into `ssh PEER docker load -q`
  push-weights  (stdin: one JSON line {repo, streams, ranged, hop, recv}) -> each stream a `recv` on
                the peer through its own ssh, fed files or ranges of large files
A push prints {"progress": bytes} lines, then {"result": ...}. Its stdin stays open: when it closes
(sparkctl was interrupted or lost the node) every child is killed at once, and a child also dies
with its parent (PR_SET_PDEATHSIG), so no transfer outlives the command that started it.
"""

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import threading
import time

from sparkctl.ship._node import (  # node: strip
    CHUNK,
    HashCache,
    dest_path,
    frame,
    free_bytes,
    op_manifest,
)
from sparkctl.ship._recv import weights_op  # node: strip
from sparkctl.ship._relay import Sink, first_hop, flatten, op_relay  # node: strip
from sparkctl.ship.tarfilter import LayerFilter, chain_ids  # node: strip

CHILDREN = []


def _libc():
    try:  # loaded before forking: nothing may be imported between fork and exec
        import ctypes

        return ctypes.CDLL(None)
    except (ImportError, OSError):
        return None


LIBC = _libc()


def _die_with_parent():
    if LIBC is not None:
        LIBC.prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL


def spawn(argv, **kw):
    """A child that dies with this process; only from the main thread (the death signal is per thread)."""
    proc = subprocess.Popen(argv, preexec_fn=_die_with_parent, **kw)  # noqa: PLW1509 - async-signal-safe
    CHILDREN.append(proc)
    return proc


def kill_children():
    for proc in CHILDREN:
        with contextlib.suppress(OSError):
            proc.kill()


def _watch_stdin():
    """The controller keeps our stdin open for the whole push; EOF means stop now."""

    def watch():
        with contextlib.suppress(OSError, ValueError):
            while sys.stdin.buffer.read(1 << 16):
                pass
        kill_children()
        os._exit(130)

    threading.Thread(target=watch, daemon=True).start()


def _docker(args, timeout=60):
    try:
        res = subprocess.run(["docker", *args], capture_output=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, "", str(exc)
    return res.returncode, res.stdout.decode(errors="replace"), res.stderr.decode(errors="replace")


def _api(path):
    """GET on the node's engine API over its unix socket: (status, doc). No process per query (the
    docker CLI costs ~0.1-0.5 s to start); None when DOCKER_HOST is not a unix socket."""
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if not host.startswith("unix://"):
        return None
    import socket
    from urllib.parse import quote

    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(60)
        sock.connect(host[len("unix://") :])
        sock.sendall(("GET %s HTTP/1.0\r\nHost: docker\r\n\r\n" % quote(path, safe="/:@?=&")).encode())  # noqa: UP031
        data = b"".join(iter(lambda: sock.recv(1 << 16), b""))
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), (json.loads(body) if body.strip() else None)


def _image_state_api(ref):
    out, first = {}, _api("/images/%s/json" % ref)  # noqa: UP031
    if first is None:
        return None
    status, doc = first
    if status == 200:
        out["id"], out["layers"], out["size"] = (
            doc["Id"],
            doc["RootFS"].get("Layers") or [],
            int(doc.get("Size") or 0),
        )
        status, hist = _api("/images/%s/history" % doc["Id"])  # noqa: UP031
        out["history"] = [int(h.get("Size") or 0) for h in reversed(hist)] if status == 200 else []
    elif status != 404:
        out["error"] = "docker engine answered %s: %s" % (status, (doc or {}).get("message"))  # noqa: UP031
    _status, images = _api("/images/json?all=1")
    docs = [_api("/images/%s/json" % img["Id"])[1] for img in images or []]  # noqa: UP031
    out["chains"] = [chain_ids(d["RootFS"].get("Layers") or []) for d in docs if d]
    status, info = _api("/info")
    if status == 200 and info.get("DockerRootDir"):
        with contextlib.suppress(OSError):
            out["free"] = free_bytes(info["DockerRootDir"])
    return out


def image_state(ref):
    """Image ID, layers and sizes of REF, the layer chains of every image, free space of the data root."""
    try:
        got = _image_state_api(ref)
        if got is not None:
            return got
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        pass  # an engine API we cannot read this way: the CLI below
    out = {}
    rc, text, err = _docker(["image", "inspect", ref])
    if rc == 0:
        doc = json.loads(text)[0]
        out["id"], out["layers"], out["size"] = (
            doc["Id"],
            doc["RootFS"].get("Layers") or [],
            int(doc.get("Size") or 0),
        )
        rc, text, _err = _docker(["image", "history", "--human=false", "--format", "{{.Size}}", doc["Id"]])
        out["history"] = [int(x) for x in text.split() if x.isdigit()][::-1] if rc == 0 else []
    elif "no such image" not in err.lower():
        out["error"] = (err.strip().splitlines() or ["docker failed"])[-1]
    rc, text, _err = _docker(["image", "ls", "-aq", "--no-trunc"])
    ids = sorted(set(text.split()))
    rc, text, _err = _docker(["image", "inspect", *ids]) if ids and rc == 0 else (1, "", "")
    out["chains"] = [
        chain_ids(d["RootFS"].get("Layers") or []) for d in (json.loads(text) if rc == 0 else [])
    ]
    rc, text, _err = _docker(["info", "-f", "{{.DockerRootDir}}"])
    if rc == 0 and text.strip():
        with contextlib.suppress(OSError):
            out["free"] = free_bytes(text.strip())
    return out


def op_state(req):
    out = {"image": None, "models": {}, "cores": os.cpu_count() or 1}
    t = None
    if req.get("image"):
        t = threading.Thread(target=lambda: out.__setitem__("image", image_state(req["image"])))
        t.start()
    for repo, revision in req.get("models", []):
        try:
            doc = op_manifest(repo, revision, req.get("mode", "lazy"))
        except (OSError, ValueError) as exc:
            doc = {"commit": None, "files": {}, "error": str(exc)}
        doc["free"] = free_bytes(repo)
        out["models"][repo] = doc
    if t is not None:
        t.join()
    return out


class Meter:
    """Bytes moved so far, printed as progress lines by the main thread."""

    def __init__(self):
        self.n = 0
        self.lock = threading.Lock()

    def add(self, n):
        with self.lock:
            self.n += n

    def report_until(self, done, extra=None):
        last = -1
        while True:
            finished = done()
            now = self.n + (extra() if extra else 0)
            if now != last:
                sys.stdout.write(json.dumps({"progress": now}) + "\n")
                sys.stdout.flush()
                last = now
            if finished:
                return
            time.sleep(0.2)


def _rchar(pid):
    """Bytes a process has read so far (its stdin, for ssh fed straight from `docker save`)."""
    try:
        with open("/proc/%d/io" % pid) as fh:  # noqa: UP031
            return int(next(line for line in fh if line.startswith("rchar:")).split()[1])
    except (OSError, StopIteration, ValueError):
        return 0


def op_push_image(req):
    """`docker save`, minus the layers every peer of the chain has, into the chain."""
    argv, line = first_hop(req["chain"], req.get("prog"))
    save = spawn(["docker", "save", req["ref"]], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    meter, filt = Meter(), None
    if not req["skip"] and not line:  # one peer, nothing to drop: the kernel moves the bytes, like the recipe
        sink = Sink(
            req["chain"][0]["node"], argv, b"", lambda a, **kw: spawn(a, **{**kw, "stdin": save.stdout})
        )
        save.stdout.close()
        meter.report_until(lambda: sink.proc.poll() is not None, lambda: _rchar(sink.proc.pid))
        sent = None
    else:
        sink = Sink(req["chain"][0]["node"], argv, line, spawn)
        filt = LayerFilter(req["diff_ids"], set(req["skip"]))
        done = threading.Event()

        def pump():
            try:
                for chunk in filt.filter(iter(lambda: save.stdout.read(CHUNK), b"")):
                    sink.write(chunk)
                    meter.add(len(chunk))
                    if not sink.alive:
                        return
            finally:
                done.set()

        threading.Thread(target=pump, daemon=True).start()
        meter.report_until(done.is_set)
        sent = meter.n
    peers = flatten(sink.close()) if line or sent is not None else flatten(_closed(sink))
    save_rc = save.wait()
    return {
        "sent": sent,
        "peers": peers,
        "save_rc": save_rc,
        "save_err": save.stderr.read().decode(errors="replace")[-2000:],
        "skipped_layers": sorted(set(filt.skipped_layers)) if filt else [],
        "skipped_bytes": filt.skipped_bytes if filt else 0,
    }


def _closed(sink):
    """A sink whose stdin is not ours (fed by `docker save` directly)."""
    sink.proc.stdin = None
    sink.proc.wait()
    for t in sink.readers:
        t.join()
    return {
        "node": sink.node,
        "rc": sink.proc.returncode,
        "out": b"".join(sink.out).decode(errors="replace"),
        "err": b"".join(sink.err).decode(errors="replace")[-2000:],
    }


def _send_stream(repo, items, sink, meter, hashes, errors):
    """One stream: header + bytes per whole file (hashed on the way) or range, then the end line."""
    view = memoryview(bytearray(CHUNK))
    try:
        for dest, offset, length in items:
            with open(os.path.realpath(dest_path(repo, dest)), "rb", buffering=0) as fh:
                st = os.fstat(fh.fileno())
                whole = offset is None
                head = {"path": dest, "size": st.st_size if whole else length}
                if not whole:
                    head["offset"] = offset
                    fh.seek(offset)
                sink.write(frame(head))
                h, left = hashlib.sha256() if whole else None, head["size"]
                while left and sink.alive:
                    n = fh.readinto(view[: min(CHUNK, left)])
                    if not n:
                        raise EOFError(dest + " shrank while being sent")
                    if h is not None:
                        h.update(view[:n])
                    sink.write(view[:n])
                    meter.add(n)
                    left -= n
                if h is not None and not left:
                    hashes[dest] = (st, h.hexdigest())
        sink.write(frame({"end": True}))
    except (OSError, EOFError, ValueError) as exc:
        errors.append(str(exc))


def op_push_weights(req):
    repo, meter, hashes, errors = req["repo"], Meter(), {}, []
    sinks, threads = [], []
    for items in req["streams"]:
        argv, line = first_hop(req["chain"], req["prog"])
        sink = Sink(req["chain"][0]["node"], argv, line, spawn)
        t = threading.Thread(
            target=_send_stream, args=(repo, items, sink, meter, hashes, errors), daemon=True
        )
        t.start()
        sinks.append(sink)
        threads.append(t)
    ranged = dict(req.get("ranged", {}))
    todo = [d for d, sha in ranged.items() if not sha]

    def hash_ranged():
        cache = HashCache(repo)
        for dest in todo:
            ranged[dest] = cache.sha256(dest, os.path.realpath(dest_path(repo, dest)))[0]
        cache.save()

    if todo:
        t = threading.Thread(target=hash_ranged, daemon=True)
        t.start()
        threads.append(t)
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
