"""Pure parsers of the node probes, on text as the real tools print it."""

from __future__ import annotations

import json
import subprocess

import pytest

from sparkctl.connectors.local import LocalConnector
from sparkctl.facts.disk import df_probe, du_probe, parse_df
from sparkctl.facts.hfcache import SNAPSHOT_SCRIPT, RepoListing, parse_repo_listing, resolve_revision
from sparkctl.facts.net import SPEEDS_MARK, netdevs_probe, parse_listening_ports, parse_netdevs, parse_ping
from sparkctl.facts.probe import ParseError, ProbeError, run_batch, sh_argv
from sparkctl.facts.rdma import ipv4_gid

IP_JSON = json.dumps(
    [
        {
            "ifindex": 1,
            "ifname": "lo",
            "flags": ["LOOPBACK", "UP", "LOWER_UP"],
            "mtu": 65536,
            "operstate": "UNKNOWN",
            "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}],
        },
        {
            "ifindex": 5,
            "ifname": "enp1s0f1np1",
            "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"],
            "mtu": 1500,
            "operstate": "UP",
            "addr_info": [
                {"family": "inet", "local": "192.168.100.11", "prefixlen": 24},
                {"family": "inet6", "local": "fe80::1", "prefixlen": 64},
            ],
        },
        {
            "ifindex": 6,
            "ifname": "enp1s0f0np0",
            "flags": ["BROADCAST", "MULTICAST"],
            "mtu": 9000,
            "operstate": "DOWN",
            "addr_info": [],
        },
    ]
)


def test_netdevs() -> None:
    devs = parse_netdevs(f"{IP_JSON}\n{SPEEDS_MARK}\nlo \nenp1s0f1np1 200000\nenp1s0f0np0 -1\n")
    fab = devs["enp1s0f1np1"]
    assert (fab.mtu, fab.up, fab.ips, fab.speed_mbps) == (1500, True, ("192.168.100.11",), 200000)
    assert not devs["enp1s0f0np0"].up and devs["enp1s0f0np0"].speed_mbps is None
    with pytest.raises(ParseError):
        parse_netdevs('Object "addr" is unknown')


def test_netdevs_probe_on_this_machine() -> None:
    devs = netdevs_probe().run(LocalConnector("here"))
    assert devs["lo"].mtu == 65536 and "127.0.0.1" in devs["lo"].ips


IPUTILS_OK = """PING 10.0.0.2 (10.0.0.2) 8972(9000) bytes of data.
8980 bytes from 10.0.0.2: icmp_seq=1 ttl=64 time=0.101 ms

--- 10.0.0.2 ping statistics ---
2 packets transmitted, 2 received, 0% packet loss, time 201ms
"""
IPUTILS_LOCAL_ERR = """PING 10.0.0.1 (10.0.0.1) 8972(9000) bytes of data.

--- 10.0.0.1 ping statistics ---
2 packets transmitted, 0 received, +2 errors, 100% packet loss, time 1010ms
"""
BUSYBOX_LOSS = (
    "PING 10.0.0.2 (10.0.0.2): 8972 data bytes\n\n--- 10.0.0.2 ping statistics ---\n"
    "2 packets transmitted, 0 packets received, 100% packet loss\n"
)


def test_ping() -> None:
    ok = parse_ping(0, IPUTILS_OK, "")
    assert ok.ok and (ok.sent, ok.received) == (2, 2)
    err = parse_ping(1, IPUTILS_LOCAL_ERR, "ping: local error: message too long, mtu=1500\n")
    assert not err.ok and err.error == "message too long, mtu=1500"
    lost = parse_ping(1, BUSYBOX_LOSS, "")
    assert not lost.ok and lost.sent == 2 and lost.error == "100% packet loss"
    missing = parse_ping(127, "", "ping: command not found")
    assert not missing.ok and "command not found" in missing.error


def test_listening_ports() -> None:
    text = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 00000000:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1\n"
        "   1: 0100007F:C383 0100007F:7530 01 00000000:00000000 00:00000000 00000000     0        0 2\n"
        "   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 0 0 0 0 0\n"
    )
    assert parse_listening_ports(text) == {30000, 22}


def test_df() -> None:
    text = "Filesystem     1024-blocks    Used Available Capacity Mounted on\ntmpfs 2097152 1024 2096128 1% /srv/sparknode\n"
    du = parse_df(text, "/srv/sparknode/hf")
    assert (du.mount, du.avail_kib, du.path) == ("/srv/sparknode", 2096128, "/srv/sparknode/hf")


def test_df_probe_walks_up_to_an_existing_parent(tmp_path) -> None:
    du = df_probe(str(tmp_path / "not" / "yet")).run(LocalConnector("here"))
    assert du.avail_kib > 0


def test_repo_listing_from_the_real_script(tmp_path) -> None:
    repo = tmp_path / "models--org--m"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs" / "pr").mkdir(parents=True)
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").write_text("{}")
    (repo / "snapshots" / ("f" * 40)).mkdir()
    (repo / "refs" / "main").write_text(commit)
    (repo / "refs" / "pr" / "1").write_text("f" * 40)
    out = subprocess.run(sh_argv(SNAPSHOT_SCRIPT, str(repo), ".done"), capture_output=True, text=True).stdout
    listing = parse_repo_listing(out)
    assert listing.refs == {"main": commit, "pr/1": "f" * 40}
    assert listing.snapshots == {commit: 1, "f" * 40: 0}
    assert resolve_revision(listing, None) == commit
    assert resolve_revision(listing, "0123456") == commit  # short hash (dual-spark profile's draft)
    assert resolve_revision(listing, commit) == commit
    assert resolve_revision(listing, "v2") is None
    assert not parse_repo_listing(
        subprocess.run(
            sh_argv(SNAPSHOT_SCRIPT, str(tmp_path / "x"), ".d"), capture_output=True, text=True
        ).stdout
    ).exists


def test_ref_to_a_missing_snapshot_does_not_resolve() -> None:
    assert resolve_revision(RepoListing(True, {"main": "a" * 40}, {"b" * 40: 3}), "main") is None


def test_gid() -> None:
    assert ipv4_gid("192.168.100.10") == "0000:0000:0000:0000:0000:ffff:c0a8:640a"


def test_batch_runs_probes_concurrently_in_one_exec() -> None:
    conn = LocalConnector("here")
    got = run_batch(
        conn,
        {
            "net": netdevs_probe(),
            "df": df_probe("/"),
            "bad": du_probe("/nonexistent/x"),
            "worse": df_probe("/\0x"),
        },
    )
    assert "lo" in got["net"] and got["df"].avail_kib > 0
    assert isinstance(got["bad"], ProbeError) and "du /nonexistent/x failed" in got["bad"].message
    assert isinstance(got["worse"], ProbeError)
