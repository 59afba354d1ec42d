"""A rank's command and env as a LeaderWorkerSet pod runs them (pure).

LWS places the pods of a group itself, so a pod learns its place from the variables LWS sets
in every container: `LWS_LEADER_ADDRESS` (the leader pod's DNS name), `LWS_GROUP_SIZE`,
`LWS_WORKER_INDEX`. The plan's argv is kept word for word except the three values the engine
says carry the rank's place (`Engine.layout_flags`), which become those variables.

Env that is the same on every rank of the mode goes in the pod template. Env that differs by
node (the advertised fabric address in the engine's `host_ip_env`, NICs and HCAs when nodes differ) goes in
one file per node in a ConfigMap; a two-line `sh` wrapper sources the file of the node the pod
landed on (`spec.nodeName`, through the downward API) and then `exec`s the plan's argv.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from sparkctl.engines.capabilities import LayoutFlags
from sparkctl.errors import UsageError
from sparkctl.planning.model import Plan, RankSpec
from sparkctl.secrets import SecretRef

LWS_LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"
LWS_GROUP_SIZE = "$(LWS_GROUP_SIZE)"
LWS_WORKER_INDEX = "$(LWS_WORKER_INDEX)"
NODE_ENV = "SPARKCTL_NODE"  # spec.nodeName, through the downward API
NODE_ENV_DIR = "/etc/sparkctl/nodes"
WRAPPER_NAME = "sparkctl-rank"  # $0 of the wrapper
_DOLLAR = re.compile(r"\$(?=[($])")


def escape(word: str) -> str:
    """Keep a word literal under Kubernetes' `$(VAR)` expansion of command and env ($( and $$)."""
    return _DOLLAR.sub("$$", word)


@dataclass(frozen=True)
class RankCommand:
    argv: list[str]  # the plan's argv, LWS variables in place, escaped for Kubernetes
    wrapped: bool  # run through the per-node env wrapper


def lws_argv(plan: Plan, spec: RankSpec, flags: LayoutFlags | None) -> list[str]:
    """The rank's plan argv (escaped) with its place in the group replaced by LWS's variables."""
    argv = [escape(w) for w in spec.argv]
    group = next(g for g in plan.groups if g.index == spec.group)  # a replica's sub-plan holds one
    if len(group.ranks) < 2:
        return argv
    if flags is None or group.dist_init_addr is None:
        raise UsageError(
            f"rank {spec.rank}: the engine does not say which flags carry a rank's place in its group",
            fix="the engine needs `layout_flags` (engines/capabilities.py) to be exported to Kubernetes",
        )
    host, port = group.dist_init_addr.rsplit(":", 1)
    places = {
        flags.nnodes: (str(len(group.ranks)), LWS_GROUP_SIZE),
        flags.node_rank: (str(spec.node_rank), LWS_WORKER_INDEX),
        flags.dist_init_addr: (group.dist_init_addr, f"{LWS_LEADER_ADDRESS}:{port}"),
    }
    if (
        flags.dist_init_port
    ):  # the rendezvous split over two flags (`LayoutFlags.dist_init_port` set: address and port)
        places[flags.dist_init_addr] = (host, LWS_LEADER_ADDRESS)
        places[flags.dist_init_port] = (port, port)
    for flag, (value, var) in places.items():
        at = [i for i, w in enumerate(spec.argv[:-1]) if w == flag]
        if len(at) != 1 or spec.argv[at[0] + 1] != value:
            raise UsageError(
                f"rank {spec.rank} on node {spec.node}: expected `{flag} {value}` once in its argv",
                fix="the engine's layout_flags must name the flags its rank_argv renders",
            )
        argv[at[0] + 1] = var
    return argv


def split_env(ranks: list[RankSpec]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """(env common to every rank, {node: env only that node's ranks have}); a node whose ranks
    disagree cannot be expressed per node and is refused."""
    for spec in ranks:
        for key, value in spec.env.items():
            if isinstance(value, SecretRef):
                raise UsageError(
                    f"rank {spec.rank}: env {key} holds a secret value",
                    fix="deliver secrets as files (engine.secrets): the export mounts them from a Secret",
                )
    first = ranks[0].env
    common = {k: str(v) for k, v in first.items() if all(r.env.get(k) == v for r in ranks)}
    per_node: dict[str, dict[str, str]] = {}
    for spec in ranks:
        own = {k: str(v) for k, v in spec.env.items() if k not in common}
        if per_node.setdefault(spec.node, own) != own:
            raise UsageError(
                f"node {spec.node}: its ranks need different env ({', '.join(sorted(own))})",
                fix="Kubernetes pods learn only their node; give the ranks of one node the same env",
            )
    return common, {n: e for n, e in per_node.items() if e}


def env_file(env: dict[str, str]) -> str:
    """A node's env file, shell-quoted (sourced by the wrapper under `set -a`)."""
    return "".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items())


def wrapper_command(argv: list[str], configmap: str) -> list[str]:
    """`sh -c SCRIPT sparkctl-rank ARGV...`: source the env file of the pod's node, exec the argv."""
    script = (
        f'f={NODE_ENV_DIR}/"${NODE_ENV}".env; '
        f'[ -r "$f" ] || {{ echo "sparkctl: no env file for node ${NODE_ENV} in ConfigMap {configmap}'
        " (fix: keep the pods on the profile's nodes, or export again)\" >&2; exit 1; }; "
        'set -a; . "$f"; set +a; exec "$@"'
    )
    return ["/bin/sh", "-c", escape(script), WRAPPER_NAME, *argv]
