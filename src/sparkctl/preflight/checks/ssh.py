"""SshReachable (the runner reports unreachable nodes) and SshRank0ToPeer (each group's rank 0 -> its peers)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from sparkctl.facts.net import ssh_probe
from sparkctl.facts.probe import Probe
from sparkctl.findings import Finding
from sparkctl.preflight.base import ERROR, OK, WARN, Check, Ctx, NodeFacts, probe_failure
from sparkctl.preflight.pairs import ssh_peers


class SshReachable(Check):
    name = "SshReachable"
    summary = "every node of the mode accepts our SSH key (passwordless) with a known host key"
    order = 10
    fast = True
    skip_when_unreachable = False  # the runner's connect error is this check's ERROR
    router_node = True  # the router's node is reached like any other

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        return [Finding(self.name, OK, f"connected ({f.conn.description})", node=n) for n, f in facts.items()]  # type: ignore[union-attr]


def _peer_host(ctx: Ctx, peer: str) -> str:
    pn = ctx.profile.node(peer)
    return str(pn.fabric.ip) if pn.fabric else pn.address


class SshRank0ToPeer(Check):
    name = "SshRank0ToPeer"
    summary = "each replica group's rank 0 can SSH to its group's peers over the fabric"
    order = 20
    multi_node = True

    def probes(self, ctx: Ctx, node: str) -> dict[str, Probe]:
        prof = ctx.profile
        out = {}
        for peer in ssh_peers(ctx.plan).get(node, []):  # in this node's own probe batch
            pn = prof.node(peer)
            out[f"ssh:{peer}"] = ssh_probe(
                _peer_host(ctx, peer), port=pn.port or prof.ssh.port, user=pn.user or prof.ssh.user
            )
        return out

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        out = []
        for src, f in facts.items():
            for peer, res in f.with_prefix("ssh").items():
                if isinstance(res, Exception):
                    out.append(probe_failure(self.name, src, res))
                else:
                    out.append(check_ssh_peer(src, peer, _peer_host(ctx, peer), res.rc, res.stderr))
        return out


def check_ssh_peer(rank0: str, peer: str, host: str, rc: int, stderr: str) -> Finding:
    """SshRank0ToPeer for one pair (both ends in the message, and in data for --json)."""
    found = _ssh_finding(rank0, peer, host, rc, stderr)
    return dataclasses.replace(found, data={"src": rank0, "dst": peer, "host": host, "rc": rc})


def _ssh_finding(rank0: str, peer: str, host: str, rc: int, stderr: str) -> Finding:
    where = f"{rank0} -> {peer} ({host})"
    if rc == 0:
        return Finding("SshRank0ToPeer", OK, f"{where}: passwordless SSH works", node=rank0)
    text = stderr.strip().splitlines()
    last = text[-1] if text else f"exit {rc}"
    low = stderr.lower()
    if rc == 127:
        return Finding(
            "SshRank0ToPeer", WARN, f"no ssh client on {rank0}", "install openssh-client", node=rank0
        )
    if any(s in low for s in ("refused", "timed out", "no route", "unreachable", "could not resolve")):
        return Finding(
            "SshRank0ToPeer",
            ERROR,
            f"{where}: {last}",
            f"{peer} is not reachable from {rank0} over the fabric: check the link, routing "
            f"and that sshd on {peer} listens on {host}",
            node=rank0,
        )
    hint = (
        f"on {rank0}: `ssh-keyscan -H {host} >> ~/.ssh/known_hosts` after checking the fingerprint"
        if "host key" in low
        else f"on {rank0}: `ssh-copy-id {host}` (or `sparkctl init --ssh-setup`)"
    )
    # An error, as `ship` sees it: it copies image layers and weights node to node over this SSH
    # (never through this machine), so a peer that lacks anything could not be shipped to.
    return Finding(
        "SshRank0ToPeer",
        ERROR,
        f"{where}: path works, login does not ({last}): `sparkctl ship` copies node to node over it",
        hint + " (or --ignore SshRank0ToPeer when every node already has the image and weights)",
        node=rank0,
    )
