"""The pure planning step: profile + mode (+ discovered facts) -> exactly what runs on every rank.

No I/O happens here. `sparkctl plan` prints a Plan and `sparkctl up` executes the very same
object, so what the user reviewed is what runs. The config hash covers everything that reaches
a container (image, argv, env, mounts, options), so `up` can tell "already running" from "changed".
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace

from sparkctl.engines import get_engine
from sparkctl.engines.base import Engine, RankLayout
from sparkctl.planning import hardening as sec
from sparkctl.planning.gateway import gateway_spec
from sparkctl.planning.hardening import SECRETS_DIR, Mount, RunOptions
from sparkctl.planning.launch_gate import gate_notes, gate_spec, gate_warnings, group_gate
from sparkctl.planning.managed import check_managed
from sparkctl.planning.model import LABEL_PREFIX, ContainerRef, Endpoint, GroupSpec, Plan, PlanFacts, RankSpec
from sparkctl.planning.rank_env import gpu_request, rank_env_mounts
from sparkctl.planning.router import READINESS as ROUTER_READINESS
from sparkctl.profile.derived import check_mode, image_ref, node_path, node_user, served_model_name
from sparkctl.profile.schema import Node, Profile
from sparkctl.profile.topology import Group
from sparkctl.secrets import SecretRef

# Re-exported: callers import them from here.
__all__ = [
    "SECRETS_DIR",
    "ContainerRef",
    "Endpoint",
    "GroupSpec",
    "Mount",
    "Plan",
    "PlanFacts",
    "RankSpec",
    "RunOptions",
]

CONTAINER_HF_HOME = sec.ROOT_HOME["HF_HOME"]  # as root (hardening.container_home)
PENDING = "resolved at `up`"  # an address line of a node whose IP `up` reads on the node


def container_name(cluster: str, mode: str, rank: int, group: int | None = None) -> str:
    """`sparkctl-<cluster>-<mode>-r<rank>`; with replicas, `-g<group>-r<node rank>`."""
    if group is None:
        return f"sparkctl-{cluster}-{mode}-r{rank}"
    return f"sparkctl-{cluster}-{mode}-g{group}-r{rank}"


def mode_containers(profile: Profile, mode_name: str) -> list[tuple[str, str]]:
    """(node, container name) of every rank of a mode, without building its plan."""
    from sparkctl.profile.topology import mode_layout

    lay = mode_layout(profile, profile.modes[mode_name])
    many = lay.replicas > 1
    return [
        (s.node, container_name(profile.cluster, mode_name, s.node_rank, s.group if many else None))
        for s in lay.slots
    ]


def _config_hash(ranks: list[RankSpec]) -> str:
    material = [
        {
            "rank": r.rank,
            "node": r.node,
            "image": r.image,
            "argv": r.argv,
            "env": {k: (repr(v) if isinstance(v, SecretRef) else v) for k, v in sorted(r.env.items())},
            "mounts": [asdict(m) for m in r.mounts],
            "secrets": [(f.target, f.yaml_key, repr(f.ref), f.bind) for f in r.secrets],
            "options": asdict(r.options),
        }
        for r in ranks
    ]
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:12]


def _labels(profile: Profile, mode_name: str, spec: RankSpec, config_hash: str) -> dict[str, str]:
    return {
        f"{LABEL_PREFIX}cluster": profile.cluster,
        f"{LABEL_PREFIX}mode": mode_name,
        f"{LABEL_PREFIX}rank": str(spec.rank),
        f"{LABEL_PREFIX}group": str(spec.group),
        f"{LABEL_PREFIX}node": spec.node,
        f"{LABEL_PREFIX}config_hash": config_hash,
    }


@dataclass
class _Build:
    """What build_plan accumulates while it walks the layout's groups."""

    ranks: list[RankSpec] = field(default_factory=list)
    groups: list[GroupSpec] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)
    addresses: list[str] = field(default_factory=list)  # node: IP (from where)


def _build_group(
    profile: Profile, mode_name: str, group: Group, replicas: int, facts: PlanFacts, out: _Build
) -> None:
    mode = profile.modes[mode_name]
    engine = get_engine(profile.engine.kind)
    args = engine.serving_args(profile, mode)
    image, _ = image_ref(profile)
    head = profile.node(group.head.node)
    dist_init_addr = None
    if group.nnodes > 1:
        assert head.fabric is not None  # the schema requires it for groups over several nodes
        dist_init_addr = f"{head.fabric.ip}:{group.dist_init_port}"
    indices = []
    gate, gate_at = group_gate(profile, engine, group), None
    routed = mode.tp if replicas > 1 else None  # the router reaches the replica: its gateway answers it
    for slot in group.slots:
        node = profile.node(slot.node)
        ip = (
            _node_ip(node, facts, out, bind=True)
            if sec.needs_node_ip(profile, node, slot.node_rank)
            else None
        )
        host = sec.bind_host(profile, node, slot.node_rank, ip)
        key = _api_key_ref(profile, node)
        gateway = gateway_spec(profile, node.name, slot.node_rank, host, group.port, key, routed_tp=routed)
        host, port = (gateway.upstream_host, gateway.upstream_port) if gateway else (host, group.port)
        peers = (
            _peers(profile, group, slot.node_rank) if engine.multi_node and engine.multi_node.peers else ()
        )
        hf_home = sec.container_home(profile.engine.container.user or engine.default_user)["HF_HOME"]
        layout = RankLayout(
            slot.node_rank,
            group.nnodes,
            mode.tp,
            dist_init_addr,
            host,
            port,
            mode.pp,
            gate_port=group.gate_port if gate else None,
            peers=peers,
            hf_home=hf_home,
        )
        if gate and slot.node_rank == 0:
            gate_at = gate_spec(group, gate, host)
        argv = engine.rank_argv(profile, args, layout)
        env, mounts, secrets = rank_env_mounts(profile, mode, node, layout, engine, facts, out.unresolved)
        gpus = gpu_request(node, slot.gpu_ids, profile)
        options = sec.container_options(profile, mode, gpus, node_user(node, profile), engine.default_user)
        name = container_name(
            profile.cluster, mode_name, slot.node_rank, group.index if replicas > 1 else None
        )
        indices.append(len(out.ranks))
        out.ranks.append(
            RankSpec(
                len(out.ranks),
                node.name,
                name,
                image,
                argv,
                env,
                mounts,
                options,
                gpus=len(slot.gpu_ids),
                secrets=secrets,
                group=group.index,
                node_rank=slot.node_rank,
                gateway=gateway,
            )
        )
    endpoint, worker = _group_endpoint(profile, head, group.port, engine, replicas > 1, facts, out)
    out.groups.append(GroupSpec(group.index, indices, endpoint, dist_init_addr, head.name, worker, gate_at))


def _group_endpoint(
    profile: Profile, head: Node, port: int, engine: Engine, routed: bool, facts: PlanFacts, out: _Build
) -> tuple[Endpoint, str | None]:
    """Where this machine reaches the group's head, and (behind a router) the IP the router uses."""
    endpoint = Endpoint(
        host=_reach(profile, head, facts),
        port=port,
        served_model_name=served_model_name(profile),
        api_key=_api_key_ref(profile, head),
        readiness=engine.readiness,
    )
    worker = None  # what the router reaches the replica at: an IP, never a name
    if routed and not head.is_local and not sec.is_ip(endpoint.host):
        worker = _node_ip(head, facts, out)
    return endpoint, worker


def _peers(profile: Profile, group: Group, rank: int) -> tuple[str, ...]:
    """The fabric addresses of the group's other ranks, in rank order (an engine's RPC workers)."""
    nodes = [profile.node(s.node) for s in group.slots if s.node_rank != rank]
    return tuple(str(n.fabric.ip) for n in nodes if n.fabric is not None)


def _node_ip(node: Node, facts: PlanFacts, out: _Build, bind: bool = False) -> str:
    """The node's IP: its address when that is an IP, else the address its name has on the node
    itself (PlanFacts.addresses, filled by `up`); until then a placeholder `up` resolves (and,
    when a rank binds it, an `unresolved` note: the config hash depends on it)."""
    if sec.is_ip(node.address):
        ip, where = node.address.strip("[]"), f"nodes[{node.name}].address"
    elif node.name in facts.addresses:
        ip, where = facts.addresses[node.name]
    else:
        ip, where = f"<IP of {node.address}>", PENDING
        note = f"{node.name}: --host is the IP {node.address} has on {node.name} (resolved there by `up`)"
        if bind and note not in out.unresolved:
            out.unresolved.append(note)
    line = f"{node.name}: {ip} ({where})"
    if line not in out.addresses:
        out.addresses.append(line)
    return ip


def _api_key_ref(profile: Profile, node: Node) -> SecretRef | None:
    key = profile.engine.api_key
    return sec.secret_ref("api-key", key, node, profile, node_path) if key else None


def build_plan(profile: Profile, mode_name: str | None = None, facts: PlanFacts | None = None) -> Plan:
    from sparkctl.planning.router import router_spec
    from sparkctl.profile.topology import mode_layout

    mode_name = mode_name or profile.default_mode()
    check_mode(profile, mode_name)
    check_managed(profile, mode_name)
    mode = profile.modes[mode_name]
    lay = mode_layout(profile, mode)
    out = _Build()
    for group in lay.groups:
        _build_group(profile, mode_name, group, lay.replicas, facts or PlanFacts(), out)
    config_hash = _config_hash(out.ranks)
    ranks = [replace(r, labels=_labels(profile, mode_name, r, config_hash)) for r in out.ranks]
    router = router_spec(profile, out.groups, image_ref(profile)[0]) if lay.replicas > 1 else None
    stop_first = [
        ContainerRef(node=n, name=name, mode=other)
        for other in profile.modes
        if other != mode_name
        for n, name in mode_containers(profile, other)
    ]
    g0, gates = out.groups[0], [g.gate for g in out.groups]
    return Plan(
        cluster=profile.cluster,
        mode=mode_name,
        tp=mode.tp,
        nnodes=lay.groups[0].nnodes,
        ranks=ranks,
        endpoint=router_endpoint(profile, router, facts) if router else g0.endpoint,
        stop_first=stop_first,
        dist_init_addr=g0.dist_init_addr,
        config_hash=config_hash,
        image_source=image_ref(profile)[1],
        unresolved=out.unresolved,
        warnings=sec.plan_warnings(profile, mode) + gate_warnings(gates),
        notes=gate_notes(profile, get_engine(profile.engine.kind), gates, lay.groups[0].nnodes > 1),
        pp=mode.pp,
        groups=out.groups,
        router=router,
        addresses=out.addresses,
        node_ips=dict((facts or PlanFacts()).addresses),
    )


def _reach(profile: Profile, node: Node, facts: PlanFacts | None) -> str:
    """Where this machine reaches a node's API: the profile's host or the node's address, or, once
    `up` read it, the IP the SSH connection to that name landed on (reachable from here by
    construction, whatever resolves the name)."""
    host = sec.endpoint_host(profile, node)
    known = (facts.addresses if facts else {}).get(node.name)
    return known[0] if known and host == node.address and not sec.is_ip(host) else host


def router_endpoint(profile: Profile, router: RankSpec, facts: PlanFacts | None = None) -> Endpoint:
    node = profile.node(router.node)
    return Endpoint(
        host=_reach(profile, node, facts),
        port=profile.engine.port,
        served_model_name=served_model_name(profile),
        api_key=_api_key_ref(profile, node),
        readiness=ROUTER_READINESS,
    )
