"""Run every preflight check: all nodes in parallel over one connection each, then the pure checks.

Phase 1 gathers each node's facts (probes run concurrently on the node's one connection);
phase 2 runs what needs several nodes (pings both ways, SSH rank 0 -> peers, sizes and free
disk for what would be shipped); phase 3 is pure: facts -> Findings. A node that cannot be
reached yields one SshReachable error and SKIPs for its own checks; everything else still runs.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparkctl.connectors.pool import fan_out
from sparkctl.findings import Finding, Severity
from sparkctl.plan import Plan, PlanFacts, image_ref
from sparkctl.preflight import checks as C
from sparkctl.preflight import probes as P
from sparkctl.preflight.names import CHECKS, group_of, validate_names
from sparkctl.preflight.parsers import (
    DiskUsage,
    Netdev,
    PingResult,
    RepoListing,
    resolve_revision,
)
from sparkctl.preflight.rdma import NoRdma, RdmaDevice, check_hcas
from sparkctl.profile.schema import ModelRef, Profile
from sparkctl.ship.manifest import hf_cache_for, repo_dir, snapshot_manifest

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector
    from sparkctl.connectors.pool import NodePool
    from sparkctl.gpu.probe import GpuReport

OK, WARN, ERROR, SKIP = Severity.OK, Severity.WARN, Severity.ERROR, Severity.SKIP
MULTI_NODE = {"SshRank0ToPeer", "FabricNetdev", "Mtu", "PingDf", "RoceHca", "HostIpReachable"}


@dataclass
class NodeFacts:
    node: str
    conn: Connector | None = None
    connect_error: BaseException | None = None
    errors: dict[str, BaseException] = field(default_factory=dict)  # probe -> why it failed
    netdevs: dict[str, Netdev] | None = None
    rdma: dict[str, RdmaDevice] | None = None
    gpus: GpuReport | None = None
    meminfo: dict[str, int] | None = None
    docker: P.DockerFacts | None = None
    nvidia_hook: bool | None = None
    image: P.ImageFacts | None = None
    containers: list[P.ContainerFacts] | None = None
    ports: set[int] | None = None
    repos: dict[str, RepoListing] = field(default_factory=dict)
    disk: dict[str, Any] = field(default_factory=dict)  # "image"/"weights" -> DiskUsage | exception
    pairs: dict[str, Any] = field(default_factory=dict)  # "pingdf:<dst>", "hostip:<rank>", "ssh:<peer>"
    manifests: dict[str, Any] = field(default_factory=dict)  # model id -> ship Manifest | exception


@dataclass
class Report:
    cluster: str
    mode: str
    nodes: list[str]
    findings: list[Finding]
    elapsed_s: float = 0.0
    ignored: frozenset[str] = frozenset()

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is WARN]

    @property
    def ok(self) -> bool:
        return not self.errors

    def hcas(self) -> dict[str, list[str]]:
        """RoCE devices per node as RoceHca resolved them (for `hcas: auto`)."""
        return {
            f.node: f.data["hcas"]
            for f in self.findings
            if f.check == "RoceHca" and "hcas" in f.data and f.node
        }

    def plan_facts(self) -> PlanFacts:
        return PlanFacts(hcas=self.hcas())

    def to_json(self) -> dict:
        return {
            "cluster": self.cluster,
            "mode": self.mode,
            "nodes": self.nodes,
            "ok": self.ok,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "elapsed_s": round(self.elapsed_s, 3),
            "ignored": sorted(self.ignored),
            "findings": [f.to_json() for f in self.findings],
        }


# ----------------------------------------------------------------------------- selection
@dataclass(frozen=True)
class _Ctx:
    profile: Profile
    plan: Plan
    selected: frozenset[str]
    sysfs_root: str

    @property
    def multi(self) -> bool:
        return self.plan.nnodes > 1

    def applies(self, check: str) -> bool:
        if check not in self.selected:
            return False
        if check in MULTI_NODE and not self.multi:
            return False
        return not (check == "RoceHca" and self.profile.fabric.transport != "roce")

    def any(self, *checks: str) -> bool:
        return any(self.applies(c) for c in checks)

    @property
    def gpus_requested(self) -> bool:
        return self.profile.engine.container.gpus

    def models(self) -> list[tuple[str, str, str | None]]:
        m = self.profile.model
        out = [("target", m.target.id, m.target.revision)]
        if m.draft is not None:
            out.append(("draft", m.draft.id, m.draft.revision))
        return out

    def model_refs(self) -> list[tuple[str, ModelRef]]:
        m = self.profile.model
        return [("target", m.target), *([("draft", m.draft)] if m.draft is not None else [])]

    def hf_cache(self, node: str) -> str:
        return hf_cache_for(self.profile, node)

    def repo_dir(self, node: str, repo_id: str) -> str:
        return repo_dir(self.hf_cache(node), repo_id)


def _launch_check() -> tuple[Callable[..., list[Finding]], set[str]]:
    """The launch-check pipeline of sparkctl.launch (parser, rules, memory; not re-implemented here)."""
    from sparkctl.launch import CHECK_NAMES
    from sparkctl.launch.pipeline import preflight_findings

    return preflight_findings, set(CHECK_NAMES)


# ----------------------------------------------------------------------------- phase 1
def _shell_probes(ctx: _Ctx, node: str) -> dict[str, P.Probe]:
    """Every command this node must run for the selected checks (one batch, one exec)."""
    profile, plan = ctx.profile, ctx.plan
    probes: dict[str, P.Probe] = {}
    if ctx.any("FabricNetdev", "Mtu", "HostIpReachable"):
        probes["netdevs"] = P.netdevs_probe()
    if ctx.applies("RoceHca"):
        probes["rdma"] = P.rdma_probe(ctx.sysfs_root)
    if ctx.any("Gpus", "UnifiedMemory"):
        probes["meminfo"] = P.meminfo_probe()
        probes["gpus"] = P.gpus_probe()
    if ctx.applies("DockerEngine") and ctx.gpus_requested:
        probes["hook"] = P.nvidia_hook_probe()
    if ctx.applies("PortFree") and plan.nodes[0] == node:
        probes["ports"] = P.ports_probe()
    if ctx.any("Weights", "WeightsContent", "DiskFree", "UnifiedMemory"):
        for _, repo_id, _ in ctx.models():
            probes[f"repo:{repo_id}"] = P.repo_probe(ctx.repo_dir(node, repo_id))
    if ctx.applies("DiskFree"):
        probes["df:weights"] = P.df_probe(ctx.hf_cache(node))
    if ctx.multi:
        # Ping out of the fabric netdev; with several, routing picks.
        iface = _iface(profile, node)
        for dst in plan.nodes:
            dfab = profile.node(dst).fabric
            if dst != node and dfab is not None and ctx.applies("PingDf"):
                probes[f"pingdf:{dst}"] = P.ping_probe(
                    str(dfab.ip), size=profile.fabric.mtu - 28, iface=iface
                )
        for spec in plan.ranks:
            host_ip = spec.env.get("SGLANG_HOST_IP")
            if spec.node != node and isinstance(host_ip, str) and ctx.applies("HostIpReachable"):
                probes[f"hostip:{spec.rank}"] = P.ping_probe(host_ip, count=1)
        if node == plan.nodes[0] and ctx.applies("SshRank0ToPeer"):
            for peer in plan.nodes[1:]:
                pn = profile.node(peer)
                host = str(pn.fabric.ip) if pn.fabric else pn.address
                probes[f"ssh:{peer}"] = P.ssh_probe(
                    host, port=pn.port or profile.ssh.port, user=pn.user or profile.ssh.user
                )
    return probes


def _gather(ctx: _Ctx, pool: NodePool, node: str) -> NodeFacts:
    facts = NodeFacts(node)
    try:
        facts.conn = pool.get(node)
    except Exception as exc:  # noqa: BLE001 - ConnectError (expected) or anything else: the node's error
        facts.connect_error = exc
        return facts
    conn = facts.conn

    def docker() -> None:
        facts.docker = P.probe_docker(conn)  # raises: the engine itself is unusable ("docker")
        # The engine answered: a failure below is that query's, not "engine not reachable".
        if ctx.any("ImagePresent", "ImageSame", "DiskFree"):
            try:
                facts.image = P.probe_image(conn, image_ref(ctx.profile)[0])
            except Exception as exc:  # noqa: BLE001 - reported by ImagePresent
                facts.errors["image"] = exc
        if ctx.any("StrayContainers", "PortFree"):
            try:
                facts.containers = P.probe_containers(conn)
            except Exception as exc:  # noqa: BLE001 - reported by StrayContainers
                facts.errors["containers"] = exc
        if ctx.applies("DiskFree"):  # the engine's data root is known only now
            try:
                facts.disk["image"] = P.probe_df(conn, facts.docker.root_dir)
            except Exception as exc:  # noqa: BLE001 - reported by DiskFree
                facts.disk["image"] = exc

    tasks: dict[str, Callable[[], Any]] = {"shell": lambda: P.run_batch(conn, _shell_probes(ctx, node))}
    if ctx.any("DockerEngine", "ImagePresent", "ImageSame", "StrayContainers", "PortFree", "DiskFree"):
        tasks["docker"] = docker
    if ctx.applies("WeightsContent") and ctx.multi:
        # Hashed on the node (cached there), concurrently with the other probes of this node.
        for _, ref in ctx.model_refs():
            tasks[f"manifest:{ref.id}"] = lambda ref=ref: snapshot_manifest(
                conn, hf_cache_for(ctx.profile, node), ref
            )
    done = fan_out(list(tasks), lambda k: tasks[k]())
    facts.manifests = {k.partition(":")[2]: v for k, v in done.items() if k.startswith("manifest:")}
    if isinstance(done.get("docker"), BaseException):
        facts.errors["docker"] = done["docker"]  # type: ignore[assignment]
    shell = done["shell"]
    if isinstance(shell, BaseException):
        shell = {name: shell for name in _shell_probes(ctx, node)}
    for name, value in shell.items():
        if name.startswith("df:"):
            facts.disk[name[3:]] = value
        elif isinstance(value, BaseException):
            facts.errors[name] = value
        elif name.startswith("repo:"):
            facts.repos[name[5:]] = value
        elif ":" in name:
            facts.pairs[name] = value
        elif name == "hook":
            facts.nvidia_hook = value
        else:
            setattr(facts, name, value)
    if facts.gpus is not None:
        facts.gpus = facts.gpus.with_meminfo(facts.meminfo)
    return facts


# ----------------------------------------------------------------------------- phase 2
def _sizes(ctx: _Ctx, facts: dict[str, NodeFacts]) -> dict[tuple[str, str], Any]:
    """Bytes of weights snapshots, measured only where needed: on one node that has a model some
    other node lacks (DiskFree), and on unified-memory nodes (UnifiedMemory)."""
    live = {n: f for n, f in facts.items() if f.conn is not None}
    want: dict[str, dict[str, P.Probe]] = {}
    rank0 = ctx.plan.nodes[0]
    for _, repo_id, rev in ctx.models():
        commits = {n: resolve_revision(f.repos[repo_id], rev) for n, f in live.items() if repo_id in f.repos}
        have = [n for n, c in commits.items() if c]
        wanted = set()
        if ctx.applies("DiskFree") and have and len(have) < len(live):
            wanted.add(rank0 if rank0 in have else have[0])
        if ctx.applies("UnifiedMemory"):
            wanted |= {n for n in have if _unified(ctx.profile, live[n])}
        for n in wanted:
            path = f"{ctx.repo_dir(n, repo_id)}/snapshots/{commits[n]}"
            want.setdefault(n, {})[f"du:{repo_id}"] = P.du_probe(path)
    done = fan_out(list(want), lambda n: P.run_batch(live[n].conn, want[n]))  # type: ignore[arg-type]
    out: dict[tuple[str, str], Any] = {}
    for node, res in done.items():
        for name in want[node]:
            out[(node, name)] = res if isinstance(res, BaseException) else res.get(name)
    return out


def _unified(profile: Profile, f: NodeFacts) -> bool:
    n = profile.node(f.node)
    return bool(
        (n.gpu is not None and n.gpu.unified_memory) or (f.gpus is not None and f.gpus.unified_memory)
    )


# ----------------------------------------------------------------------------- phase 3
def _probe_failure(check: str, node: str, exc: BaseException) -> Finding:
    msg = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
    return Finding(check, ERROR, f"probe failed: {msg}", getattr(exc, "fix", None), node=node)


def _judge(ctx: _Ctx, facts: dict[str, NodeFacts], measured: dict[tuple[str, str], Any]) -> list[Finding]:
    profile, plan = ctx.profile, ctx.plan
    out: list[Finding] = []
    live = {n: f for n, f in facts.items() if f.conn is not None}
    node_checks = [c for c in CHECKS if ctx.applies(c) and c not in ("SshReachable", "Launch", "ImageSame")]

    for node, f in facts.items():
        if f.connect_error is not None:
            exc = f.connect_error
            out.append(Finding("SshReachable", ERROR, getattr(exc, "message", None) or str(exc),
                               getattr(exc, "fix", None), node=node))  # fmt: skip
            for check in node_checks:
                if check == "PortFree" and node != plan.nodes[0]:
                    continue
                out.append(Finding(check, SKIP, f"skipped: {node} unreachable", node=node))
        elif ctx.applies("SshReachable"):
            out.append(Finding("SshReachable", OK, f"connected ({f.conn.description})", node=node))

    def failed(probe: str, check: str, f: NodeFacts) -> bool:
        if probe not in f.errors:
            return False
        if probe == "docker" and check != "DockerEngine" and ctx.applies("DockerEngine"):
            out.append(Finding(check, SKIP, "skipped: Docker engine not reachable", node=f.node))
        else:
            out.append(_probe_failure(check, f.node, f.errors[probe]))
        return True

    # fabric
    for node, f in live.items():
        n = profile.node(node)
        fab = ctx.any("FabricNetdev", "Mtu") and n.fabric is not None
        if fab and not failed("netdevs", "FabricNetdev", f) and f.netdevs is not None:
            out += [
                x for x in C.check_fabric_netdevs(n, f.netdevs, profile.fabric.mtu) if ctx.applies(x.check)
            ]
        if ctx.applies("RoceHca") and n.fabric is not None:
            exc = f.errors.get("rdma")
            if isinstance(exc, NoRdma):
                out.append(Finding("RoceHca", ERROR, f"no RDMA devices under {ctx.sysfs_root}/class/infiniband",
                                   exc.fix, node=node))  # fmt: skip
            elif not failed("rdma", "RoceHca", f) and f.rdma is not None:
                out += check_hcas(
                    node, f.rdma, n.fabric.netdevs, str(n.fabric.ip), n.fabric.hcas, ctx.sysfs_root
                )
    for src, f in live.items():
        results = {**f.pairs, **{k: v for k, v in f.errors.items() if ":" in k and not k.startswith("repo:")}}
        for key, res in sorted(results.items()):
            kind, _, target = key.partition(":")
            if kind == "pingdf":
                ip = str(profile.node(target).fabric.ip)  # type: ignore[union-attr]
                iface = _iface(profile, src)
                out.append(
                    _pair_failure("PingDf", src, res)
                    or C.check_ping_df(src, target, ip, profile.fabric.mtu - 28, iface, res)
                )
            elif kind == "ssh":
                pn = profile.node(target)
                host = str(pn.fabric.ip) if pn.fabric else pn.address
                out.append(
                    _pair_failure("SshRank0ToPeer", src, res)
                    or C.check_ssh_peer(src, target, host, res.rc, res.stderr)
                )
    if ctx.applies("HostIpReachable"):
        for spec in plan.ranks:
            host_ip = spec.env.get("SGLANG_HOST_IP")
            if not isinstance(host_ip, str):
                continue
            pings: dict[str, PingResult] = {}
            for src, f in live.items():
                res = f.pairs.get(f"hostip:{spec.rank}", f.errors.get(f"hostip:{spec.rank}"))
                if isinstance(res, BaseException):
                    out.append(_probe_failure("HostIpReachable", src, res))
                elif res is not None:
                    pings[src] = res
            nf = live.get(spec.node)
            n = profile.node(spec.node)
            out += C.check_host_ip(spec.rank, spec.node, host_ip, nf.netdevs if nf else None,
                                   n.fabric.netdevs if n.fabric else [], pings)  # fmt: skip

    # docker, GPUs
    for node, f in live.items():
        n = profile.node(node)
        if ctx.applies("DockerEngine") and not failed("docker", "DockerEngine", f) and f.docker is not None:
            out += C.check_docker(node, f.docker, ctx.gpus_requested, f.nvidia_hook)
        if ctx.applies("Gpus") and not failed("gpus", "Gpus", f):
            need = next((s.gpus for s in plan.ranks if s.node == node), 0) if ctx.gpus_requested else 0
            out += C.check_gpus(n, f.gpus, need, ctx.gpus_requested)
    if ctx.applies("Gpus"):
        from sparkctl.gpu.probe import compare_nodes

        reports = {n: f.gpus for n, f in live.items() if f.gpus is not None}
        if len(reports) > 1:
            out += compare_nodes(reports)

    # image
    ref, source = image_ref(profile)
    if ctx.any("ImagePresent", "ImageSame"):
        images = {n: f.image for n, f in live.items() if "docker" not in f.errors and "image" not in f.errors}
        for n, f in live.items():
            if "image" in f.errors:
                out.append(_probe_failure("ImagePresent", n, f.errors["image"]))
            elif "docker" in f.errors and not ctx.applies("DockerEngine"):
                out.append(_probe_failure("ImagePresent", n, f.errors["docker"]))
            elif "docker" in f.errors:
                out.append(Finding("ImagePresent", SKIP, "skipped: Docker engine not reachable", node=n))
        out += [
            x
            for x in C.check_images(ref, images, plan.nodes[0], profile.image.id, source)
            if ctx.applies(x.check)
        ]

    # weights
    commits: dict[str, dict[str, str]] = {}
    for role, repo_id, rev in ctx.models():
        listings = {}
        for n, f in live.items():
            key = f"repo:{repo_id}"
            if key in f.errors:
                if ctx.applies("Weights"):
                    out.append(_probe_failure("Weights", n, f.errors[key]))
            elif repo_id in f.repos:
                listings[n] = f.repos[repo_id]
        found, commits[repo_id] = C.check_weights(
            role, repo_id, rev, listings, {n: ctx.hf_cache(n) for n in listings}
        )
        if ctx.applies("Weights"):
            out += found

    sizes = {
        (n, k[3:]): v
        for (n, k), v in measured.items()
        if k.startswith("du:") and not isinstance(v, (BaseException, type(None)))
    }

    def model_size(repo_id: str) -> int | None:
        return next((v for (n, r), v in sizes.items() if r == repo_id), None)

    # disk
    if ctx.applies("DiskFree"):
        have_image = {n: f.image for n, f in live.items() if f.image is not None}
        donor = have_image.get(plan.nodes[0]) or next(iter(have_image.values()), None)
        for node, f in live.items():
            needs: dict[str, tuple[int, DiskUsage]] = {}
            df_img, df_w = f.disk.get("image"), f.disk.get("weights")
            for df in (df_img, df_w):
                if isinstance(df, BaseException):
                    out.append(_probe_failure("DiskFree", node, df))
            if isinstance(df_img, DiskUsage):
                ship = donor.size if donor is not None and f.image is None else 0
                if f.image is not None and donor is not None and f.image.id != donor.id:
                    ship = donor.size
                needs["image"] = (ship, df_img)
            if isinstance(df_w, DiskUsage):
                ship = sum(model_size(r) or 0 for _, r, _ in ctx.models() if node not in commits.get(r, {}))
                needs["weights"] = (ship, df_w)
            out += C.check_disk(node, needs)

    # ports, containers
    rank0 = plan.nodes[0]
    for node, f in live.items():
        if (
            ctx.applies("StrayContainers")
            and not failed("docker", "StrayContainers", f)
            and not failed("containers", "StrayContainers", f)
            and f.containers is not None
        ):
            out += C.check_stray(node, f.containers, plan, profile)
        if (
            ctx.applies("PortFree")
            and node == rank0
            and not failed("ports", "PortFree", f)
            and f.ports is not None
        ):
            wanted = {profile.engine.port: "HTTP"}
            if ctx.multi:
                wanted[profile.fabric.dist_init_port] = "dist-init"
            out += C.check_ports(node, f.ports, wanted, f.containers, plan)

    # unified memory
    if ctx.applies("UnifiedMemory"):
        for node, f in live.items():
            if not _unified(profile, f) or f.meminfo is None:
                continue
            spec = next(s for s in plan.ranks if s.node == node)
            weights = None
            tsize = sizes.get((node, profile.model.target.id)) or model_size(profile.model.target.id)
            if tsize is not None:
                weights = tsize // plan.nnodes
                if profile.model.draft is not None:
                    weights += (
                        sizes.get((node, profile.model.draft.id)) or model_size(profile.model.draft.id) or 0
                    )
            out.append(C.check_unified_memory(node, f.meminfo, weights, C.mem_fraction(spec.argv)))
    return out


def _iface(profile: Profile, node: str) -> str | None:
    fab = profile.node(node).fabric
    return fab.netdevs[0] if fab is not None and len(fab.netdevs) == 1 else None


def _pair_failure(check: str, node: str, res: Any) -> Finding | None:
    return _probe_failure(check, node, res) if isinstance(res, BaseException) else None


def _weights_content(ctx: _Ctx, facts: dict[str, NodeFacts]) -> list[Finding]:
    """Compare the snapshot manifests gathered on each node where every node has the same commit."""
    out: list[Finding] = []
    rank0 = ctx.plan.nodes[0]
    for role, ref in ctx.model_refs():
        live = {n: f for n, f in facts.items() if f.conn is not None and ref.id in f.repos}
        commits = {n: resolve_revision(f.repos[ref.id], ref.revision) for n, f in live.items()}
        if rank0 not in commits or None in commits.values() or len(set(commits.values())) != 1:
            continue  # presence/commit findings already say what is wrong
        manifests = {n: f.manifests[ref.id] for n, f in live.items() if ref.id in f.manifests}
        out += C.check_weights_content(role, ref.id, manifests, rank0)
    return out


# ----------------------------------------------------------------------------- entry point
def run_preflight(
    profile: Profile,
    plan: Plan,
    pool: NodePool,
    *,
    only: set[str] | frozenset[str] | None = None,
    ignore: set[str] | frozenset[str] = frozenset(),
    sysfs_root: str = "/sys",
) -> Report:
    """Run the selected checks on the plan's nodes; never raises for what it finds (see Report)."""
    start = time.monotonic()
    launch, launch_names = _launch_check()
    selected = validate_names(set(only), "--only", launch_names) if only is not None else set(CHECKS)
    ignored = validate_names(set(ignore), "--ignore", launch_names)
    ctx = _Ctx(profile, plan, frozenset(selected), sysfs_root)
    facts = fan_out(plan.nodes, lambda n: _gather(ctx, pool, n))
    node_facts: dict[str, NodeFacts] = {}
    for node, res in facts.items():
        node_facts[node] = res if isinstance(res, NodeFacts) else NodeFacts(node, connect_error=res)
    findings = _judge(ctx, node_facts, _sizes(ctx, node_facts))
    if ctx.applies("WeightsContent") and ctx.multi:
        findings += _weights_content(ctx, node_facts)
    if "Launch" in selected or selected & launch_names:
        try:
            findings += [
                dataclasses.replace(f, data={**f.data, "group": "Launch"})
                for f in launch(plan, profile, pool, {n: nf.gpus for n, nf in node_facts.items()})
                if "Launch" in selected or f.check in selected  # --only MemoryFit runs just that one
            ]
        except Exception as exc:  # noqa: BLE001 - another module's failure must not hide ours
            findings.append(Finding("Launch", SKIP, f"launch-safety checks failed to run: {exc}"))
    findings = _apply_ignore(findings, ignored)
    order = {c: i for i, c in enumerate(CHECKS)}
    ranks = {n: i for i, n in enumerate(plan.nodes)}
    findings.sort(
        key=lambda f: (ranks.get(f.node or "", len(ranks)), order.get(group_of(f.check), len(order)))
    )
    return Report(
        profile.cluster, plan.mode, plan.nodes, findings, time.monotonic() - start, frozenset(ignored)
    )


def _apply_ignore(findings: list[Finding], ignored: set[str]) -> list[Finding]:
    """--ignore downgrades errors of the named checks to warnings (kubeadm style)."""
    out = []
    for f in findings:
        names = {f.check, group_of(f.check), f.data.get("group")}
        if f.severity is ERROR and names & ignored:
            f = dataclasses.replace(
                f, severity=WARN, message=f"{f.message} [ignored]", data={**f.data, "ignored": True}
            )
        out.append(f)
    return out
