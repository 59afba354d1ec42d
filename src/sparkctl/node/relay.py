"""Runs ON a node (python3 stdlib only), part of the node program: the pipeline to several peers.

A chain is a list of {"node", "hop", "cmd", "remote", "relay"}: `hop` is the ssh argv that reaches
that node from the previous one, `cmd` what consumes the bytes there (`docker load -q`, or the
`recv` op); `remote` and `relay` are `cmd` and the relay's boot line as the one string ssh sends,
encoded by sparkctl so that no login shell parses an argument (hop.py `chain_entry`). With one
peer the sender runs `ssh PEER CMD` and writes the bytes. With more, every peer but the last runs
`relay`: it feeds its own CMD and forwards the same bytes to the next peer, so each byte leaves
the source once and crosses every link once (a pipeline: all peers receive at the same time).

A relay gets the program itself and the rest of the chain in a first stdin line, read by BOOT, so
no command line grows with the chain. It prints {"node", "local": {rc, out, err}, "next": ...}.
"""

import contextlib
import json
import sys
import threading

from .base import CHUNK, big_pipe  # node: strip

BOOT = (
    "import sys,json;h=json.loads(sys.stdin.buffer.readline());sys.argv=['-c','relay'];"
    "exec(compile(h['prog'],'sparkctl-node','exec'),{'__name__':'__main__','HEAD':h})"
)


def first_hop(chain, prog):
    """(argv that starts the chain from here, the line to write before the bytes)."""
    head = chain[0]
    if len(chain) == 1:
        cmd, remote, line = head["cmd"], head["remote"], b""
    else:
        line = (json.dumps({"prog": prog, "chain": chain}) + "\n").encode()
        cmd, remote = ["python3", "-c", BOOT], head["relay"]
    return (head["hop"] + [remote] if head["hop"] else cmd), line


class Sink:
    """A child process fed from here; a child that stopped reading is dropped, the others go on."""

    def __init__(self, node, argv, line, spawn):
        self.node = node
        import subprocess

        self.proc = spawn(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if self.proc.stdin is not None:  # None: fed by another process directly (see op_push_image)
            big_pipe(self.proc.stdin.fileno())
        self.out, self.err = [], []
        self.readers = [
            threading.Thread(target=lambda: self.out.append(self.proc.stdout.read()), daemon=True),
            threading.Thread(target=lambda: self.err.append(self.proc.stderr.read()), daemon=True),
        ]
        for t in self.readers:
            t.start()
        self.alive = True
        if line:
            self.write(line)

    def write(self, data):
        if not self.alive:
            return
        try:
            self.proc.stdin.write(data)
        except OSError:
            self.alive = False

    def close(self):
        """Wait for the child and take its output; its stdin is closed first where it is ours
        (None: the child reads another process's stream directly)."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        self.proc.wait()
        for t in self.readers:
            t.join()
        return {
            "node": self.node,
            "rc": self.proc.returncode,
            "out": b"".join(self.out).decode(errors="replace")[-8000:],
            "err": b"".join(self.err).decode(errors="replace")[-2000:],
        }


def op_relay(head, spawn):
    chain, prog = head["chain"], head["prog"]
    local = Sink(chain[0]["node"], chain[0]["cmd"], b"", spawn)
    argv, line = first_hop(chain[1:], prog)
    down = Sink(chain[1]["node"], argv, line, spawn)
    inp = sys.stdin.buffer
    big_pipe(inp.fileno())
    while True:
        data = inp.read1(CHUNK) if hasattr(inp, "read1") else inp.read(CHUNK)
        if not data:
            break
        local.write(data)
        down.write(data)
    return {"node": chain[0]["node"], "local": local.close(), "next": down.close()}


def last_json(text):
    """The last line of a child's output as a JSON object ({} when it is not one)."""
    try:
        doc = json.loads(text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}
    return doc if isinstance(doc, dict) else {}


def flatten(res):
    """{node: {rc, out, err}} from a sink's result, unfolding the relays' nested reports."""
    doc = last_json(res["out"]) if res["rc"] == 0 else None
    if isinstance(doc, dict) and "local" in doc and "next" in doc:
        out = {doc["node"]: doc["local"]}
        out.update(flatten(doc["next"]))
        return out
    return {res["node"]: res}
