"""After `ship` on unified memory: the page cache said, and dropped on request (ship/pagecache.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from types import SimpleNamespace

import pytest

from sparkctl.connectors.base import RunResult
from sparkctl.profile import load_profile_text
from sparkctl.ship import pagecache

GIB = 1 << 30
PROFILE = """
cluster: c1
nodes:
  - {name: a, address: 10.0.0.1, gpu: {name: NVIDIA GB10, memory_gib: 119.7, compute_capability: "12.1", unified_memory: true}}
  - {name: b, address: 10.0.0.2, gpu: {name: NVIDIA GB10, memory_gib: 119.7, compute_capability: "12.1", unified_memory: true}}
  - {name: c, address: 10.0.0.3}
image: {ref: img:1}
model: {target: {id: org/m}}
modes: {dp3: {nodes: [a, b, c], replicas: 3}}
"""


def report(*results):
    return SimpleNamespace(results=[SimpleNamespace(**r) for r in results])


def test_unified_nodes_that_moved_many_gib_are_told() -> None:
    prof = load_profile_text(PROFILE)
    rep = report(
        {"node": "b", "source": "a", "action": "shipped", "bytes_sent": 164 * GIB},
        {"node": "c", "source": "a", "action": "shipped", "bytes_sent": 164 * GIB},  # c: discrete GPU
        {"node": "a", "source": "", "action": "skipped", "bytes_sent": 0},
    )
    assert pagecache.moved_by_node(rep) == {"b": 164 * GIB, "a": 328 * GIB, "c": 164 * GIB}
    found = pagecache.notes(prof, rep)
    assert [(n.node, n.moved) for n in found] == [("b", 164 * GIB), ("a", 328 * GIB)]
    line = found[0].line()
    assert "b: 164.0 GiB moved through the page cache on unified memory" in line
    assert (
        "`sparkctl ship --drop-caches` drops it, or run on b: `sync; echo 3 | sudo tee /proc/sys/vm/drop_caches`"
        in line
    )
    small = report({"node": "b", "source": "a", "action": "shipped", "bytes_sent": GIB})
    assert pagecache.notes(prof, small) == []


class Pool:
    def __init__(self, run) -> None:
        self.run = run

    def get(self, node: str):
        return SimpleNamespace(run=lambda argv, timeout=None: self.run(node, argv))


@pytest.mark.skipif(shutil.which("setpriv") is None or os.geteuid() != 0, reason="needs root and setpriv")
def test_not_root_without_sudo_gets_the_exact_command() -> None:
    def as_nobody(node, argv):  # the real script, as an unprivileged user: it must not drop anything
        p = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv],
            capture_output=True,
            text=True,
        )
        return RunResult(node, tuple(argv), p.returncode, p.stdout, p.stderr)

    (note,) = pagecache.drop(Pool(as_nobody), [pagecache.CacheNote("b", 164 * GIB)])
    assert not note.dropped and note.error == "not root, and sudo asks for a password"
    assert note.line().endswith(
        "not dropped (not root, and sudo asks for a password): run on b: "
        "`sync; echo 3 | sudo tee /proc/sys/vm/drop_caches`"
    )


def test_a_drop_reports_memfree_before_and_after() -> None:
    def dropped(node, argv):
        return RunResult(node, tuple(argv), 0, "1048576 104857600\n", "")

    (note,) = pagecache.drop(Pool(dropped), [pagecache.CacheNote("a", 3 * GIB)])
    assert note.dropped and note.line() == "a: page cache dropped (MemFree 1.0 GiB -> 100.0 GiB)"
