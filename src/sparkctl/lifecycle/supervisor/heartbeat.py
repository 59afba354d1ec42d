"""The fabric heartbeat: while a multi-node group serves, each of its nodes checks its peers'
fabric addresses (the path the ranks use, not the management network) every EVERY_S, from the
supervisor over the SSH connections it already holds. A peer silent for SILENT_S is a partition,
told with the node pair and the link; the supervisor then holds the group down until the link
answers again and starts it afresh (supervise.py).

The probe is a TCP connect from the node to the peer's fabric IP at the group's rendezvous port:
an answer of any kind (accepted, or refused by the peer's kernel) proves the path works both
ways; only silence (a timeout, no route, no carrier) counts. Measured on the lab: the request
path of a partitioned TP=2 pair of the real engine hangs 300 s, and the canary needed 44-88 s (issue 41).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sparkctl.connectors.pool import NodePool
from sparkctl.fanout import fan_out
from sparkctl.node.pack import PYTHON
from sparkctl.planning.build import Plan
from sparkctl.profile.schema import Profile

EVERY_S = 1.0  # between two checks of every link
PROBE_TIMEOUT_S = 1.0  # one connect attempt
SILENT_S = 4.0  # no answer this long: a partition (detection <= SILENT_S + EVERY_S + a probe)

# Runs on the node (stdlib only): argv = timeout, then ip:port per peer; prints {address: "ok"|why}.
PROBE = """import json,socket,sys
t=float(sys.argv[1]);out={}
for a in sys.argv[2:]:
 h,_,p=a.rpartition(':');s=socket.socket();s.settimeout(t)
 try:s.connect((h,int(p)));out[a]='ok'
 except ConnectionRefusedError:out[a]='ok'
 except OSError as e:out[a]=e.strerror or type(e).__name__
 finally:s.close()
print(json.dumps(out))"""


@dataclass(frozen=True)
class Link:
    node: str  # where the probe runs
    peer: str
    address: str  # the peer's fabric ip:port


def links(profile: Profile, plan: Plan) -> list[Link]:
    """Every ordered node pair of every multi-node group, by the peer's fabric address."""
    out: list[Link] = []
    for group in plan.groups:
        nodes = list(dict.fromkeys(plan.rank(r).node for r in group.ranks))
        port = (group.dist_init_addr or "").rpartition(":")[2]
        if len(nodes) < 2 or not port.isdigit():
            continue
        for node in nodes:
            for peer in nodes:
                fabric = profile.node(peer).fabric
                if peer != node and fabric is not None:
                    out.append(Link(node, peer, f"{fabric.ip}:{port}"))
    return out


class Heartbeat:
    """The links' last answers (monotonic s); `feed` is the decision, pure."""

    def __init__(self, all_links: list[Link], now: float) -> None:
        self.links = all_links
        self.reset(now)

    def reset(self, now: float) -> None:
        self.last_ok = {link: now for link in self.links}
        self.why: dict[Link, str] = {}
        self.answered: set[Link] = set()  # the links that answered at the last check
        self.next_at = now

    def due(self, now: float) -> bool:
        return bool(self.links) and now >= self.next_at

    def feed(self, answers: dict[str, dict[str, str]], now: float) -> dict | None:
        """answers: {node: {address: "ok" | why}} (a node whose probe could not run is absent: the
        management path is the watch's business). The partition cause, or None."""
        self.next_at = now + EVERY_S
        self.answered = set()
        probed: set[Link] = set()  # a link is silent only by a probe that ran, never by no news
        for link in self.links:
            got = answers.get(link.node, {}).get(link.address)
            if got == "ok":
                self.answered.add(link)
                self.last_ok[link] = now
                self.why.pop(link, None)
            elif got is not None:
                probed.add(link)
                self.why[link] = got
        silent = [
            (now - self.last_ok[k], k)
            for k in self.links
            if k in probed and now - self.last_ok[k] >= SILENT_S
        ]
        if not silent:
            return None
        quiet, link = max(silent, key=lambda s: s[0])
        return {
            "cause": f"fabric partition: {link.node} cannot reach {link.peer} at {link.address} "
            f"({self.why.get(link, 'no answer')}) for {quiet:.1f}s",
            "node": link.node,
            "peer": link.peer,
            "link": link.address,
            "detected_by": "heartbeat",
            "silent_s": round(quiet, 2),  # since the last answer: the fault is at most this old
        }

    def healthy(self) -> bool:
        """Every link answered at the last check."""
        return self.answered >= set(self.links)

    def check(self, pool: NodePool, now_fn) -> dict | None:  # noqa: ANN001 - time.monotonic
        """Probe every link from its node (in parallel) and feed the answers."""
        by_node: dict[str, list[str]] = {}
        for link in self.links:
            by_node.setdefault(link.node, []).append(link.address)

        def probe(node: str) -> dict[str, str]:
            argv = [*PYTHON, "-c", PROBE, str(PROBE_TIMEOUT_S), *by_node[node]]
            res = pool.get(node).run(argv, timeout=PROBE_TIMEOUT_S * len(by_node[node]) + 10)
            return json.loads(res.stdout.strip().splitlines()[-1]) if res.ok else {}

        res = fan_out(list(by_node), probe)
        return self.feed(dict(res.ok), now_fn())
