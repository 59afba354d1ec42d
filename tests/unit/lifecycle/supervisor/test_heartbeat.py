"""The fabric heartbeat (lifecycle/supervisor/heartbeat.py): the links of a multi-node group by
the peers' fabric addresses, the probe on a node (an answer of any kind is alive, silence is
not), a peer silent past SILENT_S told as a partition with the pair and the link."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from sparkctl.lifecycle.supervisor import heartbeat
from sparkctl.lifecycle.supervisor.heartbeat import SILENT_S, Heartbeat, Link
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_text

ROOT = Path(__file__).resolve().parents[4]
DUAL = (ROOT / "profiles" / "dual-spark.yaml").read_text()


def test_links_are_every_ordered_pair_by_the_peers_fabric_address() -> None:
    prof = load_profile_text(DUAL)
    plan = build_plan(prof, "tp2")
    port = plan.dist_init_addr.rpartition(":")[2]
    assert heartbeat.links(prof, plan) == [
        Link("spark1", "spark2", f"192.168.100.11:{port}"),
        Link("spark2", "spark1", f"192.168.100.10:{port}"),
    ]
    assert heartbeat.links(prof, build_plan(prof, "solo")) == []  # one node: nothing to check


def test_a_peer_silent_past_the_bound_is_a_partition_naming_pair_and_link() -> None:
    a, b = Link("n1", "n2", "10.0.0.2:29500"), Link("n2", "n1", "10.0.0.1:29500")
    beat = Heartbeat([a, b], now=0.0)
    ok = {"n1": {a.address: "ok"}, "n2": {b.address: "ok"}}
    assert beat.feed(ok, 1.0) is None and beat.healthy()
    cut = {"n1": {a.address: "timed out"}, "n2": {b.address: "ok"}}
    assert beat.feed(cut, 2.0) is None and not beat.healthy()  # silent 1 s: not yet
    assert beat.feed({}, 3.0) is None  # n1's probe could not run (SSH): no news either way
    cause = beat.feed(cut, 1.0 + SILENT_S)
    assert cause is not None and cause["detected_by"] == "heartbeat"
    assert (cause["node"], cause["peer"], cause["link"]) == ("n1", "n2", "10.0.0.2:29500")
    assert "n1 cannot reach n2 at 10.0.0.2:29500 (timed out)" in cause["cause"]
    assert cause["silent_s"] == SILENT_S
    assert beat.feed(ok, 2.0 + SILENT_S) is None and beat.healthy()  # the link is back


def _probe(*addresses: str) -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, "-S", "-c", heartbeat.PROBE, "0.3", *addresses], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_probe_counts_any_answer_as_alive_and_silence_as_not() -> None:
    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        closed.bind(("127.0.0.1", 0))  # bound, not listening: the kernel refuses (RST)
        up, refused = (f"127.0.0.1:{s.getsockname()[1]}" for s in (listening, closed))
        got = _probe(up, refused, "255.255.255.255:9")  # no route (the testbed test cuts a real link)
    assert got[up] == "ok" and got[refused] == "ok"
    assert got["255.255.255.255:9"] != "ok"


def test_a_link_whose_probe_could_not_run_is_no_news_however_long() -> None:
    a, b = Link("n1", "n2", "10.0.0.2:29500"), Link("n2", "n1", "10.0.0.1:29500")
    beat = Heartbeat([a, b], now=0.0)
    only_n2 = {"n2": {b.address: "ok"}}  # n1's SSH session failed: its link was not probed
    assert beat.feed(only_n2, 2 * SILENT_S) is None and not beat.healthy()
    cause = beat.feed({"n1": {a.address: "no route"}, "n2": {b.address: "ok"}}, 2 * SILENT_S + 1)
    assert cause is not None and cause["node"] == "n1" and "(no route)" in cause["cause"]
