"""Creating a plan's containers on their nodes, and removing exactly those again when a start
fails: the steps `up` (start_group) and its router step share."""

from __future__ import annotations

from collections.abc import Mapping

from sparkctl.connectors.base import Connector
from sparkctl.connectors.pool import NodePool
from sparkctl.engines import get_engine
from sparkctl.fanout import fan_out
from sparkctl.lifecycle import logs, orphans, state
from sparkctl.lifecycle.timeline import Timeline
from sparkctl.planning.build import Plan, RankSpec
from sparkctl.planning.gateway_container import gateway_container
from sparkctl.profile.derived import node_path
from sparkctl.profile.schema import Profile
from sparkctl.runtime import containers
from sparkctl.runtime.secret_files import Sealed, seal


def prepare_nodes(profile: Profile, pool: NodePool, plan: Plan) -> None:
    by_node: dict[str, list[RankSpec]] = {}
    for spec in [*plan.ranks, *([plan.router] if plan.router else [])]:
        by_node.setdefault(spec.node, []).append(spec)

    def prep(node: str) -> None:
        log_dirs = [node_path(profile.engine.log_dir, profile.node(node), profile)]
        containers.prepare_node(pool.get(node), by_node[node], log_dirs)

    fan_out(list(by_node), prep).values_or_raise()


def start_specs(
    profile: Profile,
    pool: NodePool,
    specs: list[RankSpec],
    started: list[RankSpec],
    sealed: Mapping[str, Sealed] | None = None,
    tl: Timeline | None = None,
) -> None:
    """Start `specs` (their secrets from `sealed`, read by `up` once per rank; else read here)."""
    by_rank = {s.rank: s for s in specs}
    tl = tl or Timeline()

    def start_one(rank: int) -> None:
        spec = by_rank[rank]
        conn = pool.get(spec.node)
        started.append(spec)  # before creating it: rollback must also see a half-started container
        secrets = (sealed or {}).get(spec.container_name) or seal(spec, conn)
        with tl.step("create+start", node=spec.node, rank=containers.rank_of(spec)):
            containers.start_rank(conn, spec, secrets.tar)
        masks = list(secrets.masks)
        auth = get_engine(profile.engine.kind).auth
        patterns = auth.log_secret_patterns if auth else ()
        log_path = logs.rank_log_path(profile, spec)
        logs.start_follower(conn, spec.container_name, log_path, masks, patterns)
        if spec.gateway is not None:  # before readiness is polled: the API's address is the gateway's
            start_gateway(conn, spec, tl)

    results = fan_out(
        list(by_rank), start_one, where=lambda r: (by_rank[r].node, containers.rank_of(by_rank[r]))
    )
    for o in results.failed:
        if orphans.is_connection_loss(o.error):  # type: ignore[arg-type]
            what = "the router" if o.rank is None else f"rank {o.rank}"
            raise orphans.lost(o.node or "?", o.rank, o.error, f"starting {what}", True)  # type: ignore[arg-type]
    results.values_or_raise()


def start_gateway(conn: Connector, served: RankSpec, tl: Timeline) -> None:
    """The gateway of `served`'s API, replacing one a crash left (the rank's removal removes it)."""
    gate = gateway_container(served, containers.engine_uid(conn, served))
    containers.remove(conn, gate.container_name, grace=None)
    with tl.step("gateway", node=gate.node, rank=containers.rank_of(gate)):
        containers.start_rank(conn, gate, seal(gate, conn).tar)


def restart_gateways(pool: NodePool, served: list[RankSpec], tl: Timeline) -> None:
    """Replace the gateways of running containers (a key revoked, a bound changed): in parallel."""
    by_name = {s.container_name: s for s in served}
    fan_out(
        list(by_name), lambda n: start_gateway(pool.get(by_name[n].node), by_name[n], tl)
    ).values_or_raise()


def remove_started(
    pool: NodePool, plan: Plan, started: list[RankSpec]
) -> tuple[list[str], list[state.Pending]]:
    """SIGKILL and remove what this run started. Returns (problems, containers on lost nodes)."""
    by_rank = {s.rank: s for s in started}

    def kill(rank: int) -> bool:
        spec = by_rank[rank]
        return orphans.on_node(
            pool, spec.node, lambda c: containers.remove(c, spec.container_name, grace=None)
        )

    problems, left = [], []
    for rank, exc in fan_out(list(by_rank), kill).errors.items():
        spec = by_rank[rank]
        if orphans.is_connection_loss(exc):
            left.append(
                orphans.pending_item(
                    spec.node, spec.container_name, containers.rank_of(spec), plan.mode, str(exc)
                )
            )
        else:
            problems.append(f"{spec.container_name} on {spec.node}: {exc}")
    return problems, left
