"""`export k8s`: the plan `up` executes, as Kubernetes objects (pure: no cluster, no node).

One LeaderWorkerSet per mode (`replicas` = replica groups, `size` = nodes per group), the
per-node env in a ConfigMap, and with replicas the router (sglang-router with service discovery)
and its RBAC and Service; without, a Service on the replica's API. docs/kubernetes.md.
A fleet's service (`service`) renders the same, its name in every object's name, label and file.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from sparkctl.engines import get_engine
from sparkctl.engines.base import Engine
from sparkctl.errors import UsageError
from sparkctl.export import k8s_gateway as gateway
from sparkctl.export import k8s_pod as pod
from sparkctl.export.k8s_rank import (
    NODE_ENV,
    NODE_ENV_DIR,
    env_file,
    escape,
    lws_argv,
    split_env,
    wrapper_command,
)
from sparkctl.export.k8s_router import leader_selector, router_objects
from sparkctl.export.yamltext import dump
from sparkctl.planning.build import build_plan
from sparkctl.planning.fleet import service_plan
from sparkctl.planning.hardening import bind_host, binds_everywhere
from sparkctl.planning.model import Plan, RankSpec
from sparkctl.profile.fleet import service_profile
from sparkctl.profile.schema import Profile

LWS_API = "leaderworkerset.x-k8s.io/v1"
PROBE_PERIOD = 10


@dataclass
class K8sExport:
    plan: Plan
    namespace: str
    lws_name: str
    secret_name: str | None
    objects: dict[str, list[dict]] = field(default_factory=dict)  # file name -> documents
    files: dict[str, str] = field(default_factory=dict)  # file name -> YAML text
    notes: list[str] = field(default_factory=list)
    service: str | None = None  # a fleet's service; None: a single-model profile

    @property
    def selector(self) -> str:
        """What `sparkctl export k8s` and `plan` take for this plan: MODE, or SERVICE:MODE."""
        return f"{self.service}:{self.plan.mode}" if self.service else self.plan.mode


def dns_name(*parts: str) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    if len(name) > 40:  # LWS derives pod, StatefulSet and label values from it (63 at most)
        raise UsageError(f"the name {name} is too long for Kubernetes objects", fix="shorten cluster or mode")
    return name


def _check_exportable(plan: Plan) -> None:
    if plan.unresolved:
        raise UsageError(
            f"the plan is not settled: {plan.unresolved[0]}",
            fix="write the node's values in the profile (fabric.hcas: what `sparkctl preflight -v` resolves 'auto' "
            "to; a rank's --host: engine.host, or nodes[].address as an IP)",
        )


def _same_command(plan: Plan, engine: Engine) -> dict[int, list[str]]:
    """{node rank: its argv with LWS variables}: every group must run the same per node rank."""
    out: dict[int, list[str]] = {}
    for spec in plan.ranks:
        argv = lws_argv(plan, spec, engine.layout_flags)
        first = out.setdefault(min(spec.node_rank, 1), argv)
        if argv != first:
            i = next((i for i, (a, b) in enumerate(zip(argv, first, strict=False)) if a != b), None)
            ours, theirs = (argv[i], first[i]) if i is not None else (" ".join(argv), " ".join(first))
            raise UsageError(
                f"rank {spec.rank} on node {spec.node} runs `{ours}` where another runs `{theirs}`: "
                "one pod template cannot hold both",
                fix="bind every rank alike (engine.host: 0.0.0.0 with an engine.api_key)",
            )
    return out


def _probes(profile: Profile, plan: Plan, engine: Engine) -> dict:
    """The plan's readiness as probes: the API up (startup), then a real generation (readiness)."""
    port = plan.groups[0].endpoint.port
    head = profile.node(plan.groups[0].head_node)
    host = {} if binds_everywhere(profile) else {"host": bind_host(profile, head, 0)}
    ready = engine.readiness
    if profile.engine.api_key is None:
        started = {"httpGet": {**host, "path": ready.models_path, "port": port}}
    else:  # the models route wants the key, which stays out of the manifest: the port answering
        started = {"tcpSocket": {**host, "port": port}}
    return {
        "startupProbe": {
            **started,
            "periodSeconds": PROBE_PERIOD,
            "failureThreshold": math.ceil(profile.engine.ready_timeout / PROBE_PERIOD),
        },
        "readinessProbe": {
            "httpGet": {**host, "path": ready.health_path, "port": port},
            "periodSeconds": PROBE_PERIOD,
            "timeoutSeconds": math.ceil(ready.health_timeout),
            "failureThreshold": 3,
        },
    }


def _container(spec: RankSpec, argv: list[str], env: dict[str, str], ctx: dict) -> dict:
    wrapped = ctx["configmap"] is not None
    env_list: list[dict] = []
    if wrapped:
        env_list.append({"name": NODE_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    env_list += [{"name": k, "value": escape(v)} for k, v in env.items()]
    parts: pod.PodParts = ctx["parts"]
    container = {
        "name": "engine",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": wrapper_command(argv, ctx["configmap"]) if wrapped else argv,
        "env": env_list,
        **({"ports": ctx["ports"]} if ctx["ports"] else {}),
        "resources": pod.resources(spec, ctx["rdma_resource"]),
        "securityContext": pod.security_context(spec.options, parts),
        "volumeMounts": parts.mounts,
    }
    return {**container, **ctx["probes"]}


def _pod_template(profile: Profile, plan: Plan, spec: RankSpec, role: str, ctx: dict) -> dict:
    parts = pod.PodParts()
    pod.host_mounts(ctx["mounts"], profile.engine.offline, parts)
    if ctx["secret"]:
        pod.secret_mounts(spec, ctx["secret"], parts)
    pod.device_mounts(spec.options, ctx["rdma_resource"], parts)
    host_ipc = pod.shm_mount(spec.options, parts)
    if ctx["configmap"]:
        parts.add(
            {"name": "node-env", "configMap": {"name": ctx["configmap"]}},
            {"name": "node-env", "mountPath": NODE_ENV_DIR, "readOnly": True},
        )
    group = plan.groups[0]
    ports = (
        [{"name": "http", "containerPort": group.endpoint.port, "protocol": "TCP"}]
        if role == "leader"
        else []
    )
    if role == "leader" and group.dist_init_addr:
        ports.append({"name": "rendezvous", "containerPort": int(group.dist_init_addr.rsplit(":", 1)[1])})
    gate = spec.gateway if role == "leader" else None
    if gate is not None:  # the API port is the gateway's; the engine listens on 127.0.0.1
        ports = ports[1:]
    cctx = {**ctx, "parts": parts, "ports": ports, "probes": ctx["probes"] if role == "leader" else {}}
    container = _container(spec, ctx["argv"][0 if role == "leader" else 1], ctx["env"], cctx)
    containers = [container]
    if gate is not None:
        side, volumes = gateway.sidecar(ctx["lws_name"], gate, ctx["secret"])
        containers.append(side)
        parts.volumes.extend(volumes)
    labels = {**ctx["labels"], "sparkctl.config_hash": plan.config_hash, "sparkctl.role": role}
    spec_out = {
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        **({"hostIPC": True} if host_ipc else {}),
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": profile.engine.stop_grace,
        "affinity": pod.node_affinity(_role_nodes(plan, role), ctx["spread"]),
        "containers": containers,
        "volumes": parts.volumes,
    }
    ctx["notes"].extend(n for n in parts.notes if n not in ctx["notes"])
    return {"metadata": {"labels": labels}, "spec": spec_out}


def _role_nodes(plan: Plan, role: str) -> list[str]:
    """The nodes the plan gives this role: leaders on the groups' heads, workers on the others,
    so a template's node-specific words (an address it binds) hold wherever LWS places the pod."""
    heads = [g.head_node for g in plan.groups]
    if role == "leader":
        return list(dict.fromkeys(heads))
    return list(dict.fromkeys(r.node for r in plan.ranks if r.node_rank > 0))


def _rollout(replicas: int) -> tuple[dict, str]:
    config = {"maxUnavailable": 1, "maxSurge": 0}
    if replicas > 1:
        why = (
            f"{replicas} replicas: maxUnavailable 1, maxSurge 0. One group at a time restarts while the\n"
            f"router serves from the other {replicas - 1} (the leader turns unready, the router drops it).\n"
            "No surge: every group holds all GPUs of its nodes, so a surge group would wait for free nodes."
        )
    else:
        why = (
            "1 replica: maxUnavailable 1, maxSurge 0. There is no second replica to keep serving and no\n"
            "spare node for a surge group: the endpoint is down while the group restarts."
        )
    return {"type": "RollingUpdate", "rollingUpdateConfiguration": config}, why


COMMENTS = {
    "startupPolicy": "LeaderCreated: workers start once the leader pod exists. The leader waits for its workers at\n"
    "the rendezvous and turns ready only when the whole group serves: LeaderReady would never start them.",
    "restartPolicy": "RecreateGroupOnPodRestart: a rank restarted alone cannot rejoin its NCCL group; the group\n"
    "restarts together, as `sparkctl supervise` restarts a replica.",
    "hostNetwork": "the node's ports and RoCE NICs, as `up` runs ranks (--network host); LWS_LEADER_ADDRESS\n"
    "(the leader pod's DNS name) resolves to its node's primary address: fabric env is set per node.",
}


def _lws(profile: Profile, plan: Plan, name: str, ctx: dict) -> tuple[dict, dict[str, str]]:
    ranks = sorted((r for r in plan.ranks if r.group == plan.groups[0].index), key=lambda r: r.node_rank)
    size = len(ranks)
    rollout, why = _rollout(plan.replicas)
    if ctx["spread"] is None:
        why = (
            f"one of the mode's {ctx['units']} LeaderWorkerSets, one per replica: the replicas share a node, each\n"
            "on its own GPUs and port, which one template cannot say. Apply the files one at a time to roll."
        )
    templates: dict = {}
    if size > 1:
        templates["leaderTemplate"] = _pod_template(profile, plan, ranks[0], "leader", ctx)
        templates["workerTemplate"] = _pod_template(profile, plan, ranks[1], "worker", ctx)
    else:
        templates["workerTemplate"] = _pod_template(profile, plan, ranks[0], "leader", ctx)
    lws = {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": ctx["namespace"], "labels": dict(ctx["labels"])},
        "spec": {
            "replicas": plan.replicas,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": rollout,
            "leaderWorkerTemplate": {"size": size, "restartPolicy": "RecreateGroupOnPodRestart", **templates},
        },
    }
    return lws, {**COMMENTS, "rolloutStrategy": why}


def units(plan: Plan, name: str) -> list[tuple[str, Plan]]:
    """(LeaderWorkerSet name, the plan it runs): one for the mode; one per replica when replicas
    share a node (fewer nodes than replicas: each its own GPUs and port, one template cannot)."""
    if len(set(plan.nodes)) == len(plan.nodes):
        return [(name, plan)]
    return [(f"{name}-g{g.index}", plan.replica(g.index)) for g in plan.groups]


def _ungated(profile: Profile) -> tuple[Profile, bool]:
    """The profile without memory.gated_start, and whether it had it: nothing in Kubernetes runs
    admission and opens the engine's launch gate, so a gated pod would wait forever."""
    if not profile.memory.gated_start:
        return profile, False
    memory = profile.memory.model_copy(update={"gated_start": False})
    return profile.model_copy(update={"memory": memory}), True


def _planned(profile: Profile, mode_name: str | None, service: str | None) -> tuple[Profile, Plan, bool]:
    """(the profile the plan runs: the service's own in a fleet, the plan, whether it was gated)."""
    profile, gated = _ungated(profile)
    if service is None:
        return profile, build_plan(profile, mode_name), gated
    view = service_profile(profile, service)
    return view, service_plan(profile, service, mode_name or view.default_mode()).plan, gated


def export_k8s(
    profile: Profile,
    mode_name: str | None = None,
    namespace: str = "default",
    rdma_resource: str | None = None,
    service: str | None = None,
) -> K8sExport:
    """The objects of `mode_name`; of a fleet (`profile` with models:), those of its `service`."""
    profile, plan, gated = _planned(profile, mode_name, service)
    engine = get_engine(profile.engine.kind)
    as_node = (profile.engine.container.user or engine.default_user) == "node"
    _check_exportable(plan)
    own = ["sparkctl", profile.cluster, *([service] if service else [])]
    name = dns_name(*own, plan.mode)
    secrets = {f.target for r in [*plan.ranks, *([plan.router] if plan.router else [])] for f in r.secrets}
    out = K8sExport(plan, namespace, name, dns_name(*own, "secrets") if secrets else None, service=service)
    if gated:
        out.notes.append(
            "memory.gated_start is not exported: the ranks start ungated (nothing in the cluster runs "
            "admission and opens the engine's launch gate; a gated pod would wait forever)"
        )
    if as_node:
        out.notes.append(
            "engine.container.user: node is not exported (the node user's uid is known on the node): the "
            "pods run as the image's user (HOME and caches as for node); set securityContext.runAsUser"
        )
    if plan.ranks[0].gateway is not None:
        out.notes.append(
            "the gateway's squatter check is not exported (the engine's uid is the image's): keep other "
            "tenants' hostNetwork pods off these nodes, or one could bind the engine's loopback port first"
        )
    common, per_node = split_env(plan.ranks)
    configmap = f"{name}-nodes" if per_node else None
    labels = {"sparkctl.cluster": profile.cluster, **({"sparkctl.service": service} if service else {})}
    labels["sparkctl.mode"] = plan.mode
    todo = units(plan, name)
    stem = f"{service}-{plan.mode}" if service else plan.mode
    base = {
        "namespace": namespace,
        "labels": labels,
        "spread": labels if len(todo) == 1 else None,
        "units": len(todo),
        "env": common,
        "configmap": configmap,
        "mounts": pod.same_mounts(plan.ranks, secrets),
        "secret": out.secret_name,
        "rdma_resource": rdma_resource,
        "notes": out.notes,
    }
    for i, (lws_name, sub) in enumerate(todo):
        ctx = {**base, "argv": _same_command(sub, engine), "probes": _probes(profile, sub, engine)}
        ctx["lws_name"] = lws_name
        lws, comments = _lws(profile, sub, lws_name, ctx)
        docs: list[dict] = []
        if configmap and i == 0:
            data = {f"{node}.env": env_file(env) for node, env in per_node.items()}
            meta = {"name": configmap, "namespace": namespace, "labels": dict(labels)}
            docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
        docs.append(lws)
        if plan.router is None:
            docs.append(_api_service(sub, lws_name, namespace, labels))
        if (gate := sub.ranks[0].gateway) is not None:
            docs.append(gateway.config_map(lws_name, namespace, labels, gate))
        file = f"{stem}.yaml" if len(todo) == 1 else f"{stem}-g{sub.groups[0].index}.yaml"
        out.objects[file] = docs
        out.files[file] = dump(docs, _header(profile, out), comments)
    if plan.router is not None:
        static = len(todo) > 1
        router = router_objects(
            profile, plan, name, namespace, out.secret_name or "", engine.readiness, static, service
        )
        out.objects[f"{stem}-router.yaml"] = router
        out.files[f"{stem}-router.yaml"] = dump(router, _header(profile, out, router=True))
    return out


def _api_service(plan: Plan, lws_name: str, namespace: str, labels: dict[str, str]) -> dict:
    port = plan.groups[0].endpoint.port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"{lws_name}-api", "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "selector": leader_selector(lws_name),
            "ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }


def _header(profile: Profile, out: K8sExport, router: bool = False) -> list[str]:
    plan = out.plan
    what = "sglang-router in front of the replicas" if router else f"mode {plan.mode}: {plan.shape}"
    lines = [
        f"sparkctl export k8s {out.selector}: cluster {plan.cluster}, {what}",
        f"from the plan `sparkctl plan {out.selector}` shows (config hash {plan.config_hash}); docs/kubernetes.md",
    ]
    if out.secret_name:
        ns = "" if out.namespace == "default" else f" --namespace {out.namespace}"
        lines.append(
            f"needs Secret {out.secret_name}: sparkctl export k8s {out.selector}{ns} --secrets | kubectl apply -f -"
        )
    image = plan.router.image if router and plan.router else plan.ranks[0].image
    lines += [
        f"image {image} (imagePullPolicy IfNotPresent): `sparkctl ship` loads it into Docker; on k3s",
        f"(containerd) import it on every node: docker save {image} | sudo k3s ctr images import -",
    ]
    return lines
