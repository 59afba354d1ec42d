"""Runs ON a node (python3 stdlib only), part of the node program: the source side of `push-image`:
`docker save` (docker_api.SaveStream), minus the layers every peer of the chain has (LayerFilter),
into the chain's first ssh (relay.py), through `zstd -1` when the request's codec says so."""

import contextlib

from .base import CHUNK  # node: strip
from .children import Meter, io_count, spawn, wait_exited  # node: strip
from .docker_api import SaveStream  # node: strip
from .relay import Sink, first_hop, flatten  # node: strip
from .tarfilter import LayerFilter  # node: strip


def compressor(req, stdin, stdout):
    """`zstd -1` between the save and the link: the fastest level with most of the gain (a 2-core
    lab: 30 % fewer bytes for the time a level-1 pass costs; --adapt raised the level while the
    peer's load was the bottleneck and lost). Threads: what the controller gave of spare cores."""
    import subprocess  # node program: imported where used (every op starts the whole program)

    argv = ["zstd", "-1", "-q", "-c", "-T%d" % int(req.get("threads") or 1)]  # noqa: UP031
    return spawn(argv, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE)


def op_push_image(req):
    """`docker save`, minus the layers every peer of the chain has, into the chain."""
    argv, line = first_hop(req["chain"], req.get("prog"))
    save = SaveStream(req["ref"], spawn)
    if save.fd is None:  # the engine refused (no such image...): nothing to send
        rc, err = save.finish()
        return {
            "sent": 0,
            "peers": {},
            "save_rc": rc,
            "save_err": err,
            "skipped_layers": [],
            "skipped_bytes": 0,
        }
    codec, filt = req.get("codec"), None
    if not req["skip"] and not line:  # one peer, nothing to drop: no copy through this process
        sink, zstd, sent, wire = _whole(req, save, argv, codec)
    else:
        filt = LayerFilter(req["diff_ids"], set(req["skip"]))
        sink, zstd, sent, wire = _filtered(req, save, argv, line, codec, filt)
    zstd_err = ""
    if zstd is not None:
        zstd.wait()
        zstd_err = zstd.stderr.read().decode(errors="replace")
    peers = flatten(sink.close())
    save_rc, save_err = save.finish()
    doc = {
        "sent": sent,
        "peers": peers,
        "save_rc": save_rc,
        "save_err": save_err,
        "skipped_layers": sorted(set(filt.skipped_layers)) if filt else [],
        "skipped_bytes": filt.skipped_bytes if filt else 0,
    }
    if zstd is not None:
        doc.update(codec=codec, wire=wire, codec_rc=zstd.returncode, codec_err=zstd_err[-2000:])
    return doc


def _whole(req, save, argv, codec):
    """ssh reads the engine's stream itself, or zstd's output with zstd reading the engine's
    stream. -> (sink, zstd or None, None: the bytes were not counted here, wire bytes or None)."""
    import subprocess

    meter, zstd, feed = Meter(), None, save.fd
    if codec:
        zstd = compressor(req, save.fd, subprocess.PIPE)
        feed = zstd.stdout
    sink = Sink(req["chain"][0]["node"], argv, b"", lambda a, **kw: spawn(a, **{**kw, "stdin": feed}))
    save.detach()
    if zstd is not None:
        zstd.stdout.close()  # ssh holds it: zstd sees the link close when ssh ends
    counted, final = zstd or sink.proc, []  # what read the image's bytes: progress in them

    def ended():  # it exited: read its counts before it is reaped
        wait_exited(counted)
        final.append(io_count(counted.pid))
        if zstd is not None:  # what zstd wrote is what crossed the link
            final.append(io_count(zstd.pid, "wchar:"))

    waiter = meter.run(ended)
    meter.report_until(lambda: not waiter.is_alive(), lambda: final[0] if final else io_count(counted.pid))
    return sink, zstd, None, (final[1] if len(final) > 1 else None)


def _filtered(req, save, argv, line, codec, filt):
    """The stream through LayerFilter here, into the chain (after its header line), through zstd
    after the header when compressed. -> (sink, zstd or None, bytes sent, wire bytes or None)."""
    import subprocess

    meter, zstd, wire = Meter(), None, None
    sink = Sink(req["chain"][0]["node"], argv, line, spawn)
    write, alive = sink.write, lambda: sink.alive
    if codec:
        sink.proc.stdin.flush()
        zstd = compressor(req, subprocess.PIPE, sink.proc.stdin)
        sink.proc.stdin.close()
        write, alive = _pipe_writer(zstd.stdin)

    def pump():
        for chunk in filt.filter(iter(lambda: save.read(CHUNK), b"")):
            write(chunk)
            meter.add(len(chunk))
            if not alive():
                return

    worker = meter.run(pump)
    meter.report_until(lambda: not worker.is_alive())
    if zstd is not None:
        with contextlib.suppress(OSError):
            zstd.stdin.close()
        wait_exited(zstd)
        wire = io_count(zstd.pid, "wchar:")
    return sink, zstd, meter.n, wire


def _pipe_writer(fh):
    """(write, alive) of a child's stdin: a child that stopped reading is not written to again."""
    state = [True]

    def write(data):
        if state[0]:
            try:
                fh.write(data)
            except OSError:
                state[0] = False

    return write, lambda: state[0]
