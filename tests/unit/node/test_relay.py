"""A relay's sinks: each child's rc and output, whether this process feeds it or another one does."""

from __future__ import annotations

import os
import subprocess

from sparkctl.node.relay import Sink, first_hop, flatten


def test_a_sink_fed_from_here_reports_what_its_child_read() -> None:
    sink = Sink("n1", ["sh", "-c", "wc -c"], b"abc", subprocess.Popen)
    sink.write(b"de")
    res = sink.close()
    assert (res["node"], res["rc"], res["out"].strip()) == ("n1", 0, "5")


def test_a_sink_fed_by_another_stream_is_closed_without_touching_its_stdin() -> None:
    r, w = os.pipe()
    sink = Sink(
        "n2", ["sh", "-c", "cat; echo ok >&2"], b"", lambda a, **kw: subprocess.Popen(a, **{**kw, "stdin": r})
    )
    os.close(r)
    assert sink.proc.stdin is None
    os.write(w, b'{"rc": 0}\n')
    os.close(w)
    res = sink.close()
    assert (res["rc"], res["out"], res["err"]) == (0, '{"rc": 0}\n', "ok\n")
    assert flatten(res) == {"n2": res}


def test_one_peer_is_reached_directly_and_more_through_the_relay() -> None:
    one = [{"node": "a", "hop": ["ssh", "a"], "cmd": ["x"], "remote": "x", "relay": "r"}]
    assert first_hop(one, "PROG") == (["ssh", "a", "x"], b"")
    argv, line = first_hop([*one, {**one[0], "node": "b"}], "PROG")
    assert argv == ["ssh", "a", "r"] and b'"prog": "PROG"' in line
