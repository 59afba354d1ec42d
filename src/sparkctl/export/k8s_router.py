"""The router in front of the replicas, as Kubernetes objects (pure): sglang-router in a Deployment
that finds the replicas by watching the leader pods (service discovery, so its Role may
get/list/watch pods), its ServiceAccount, Role, RoleBinding, and the Service clients use.

The router runs in the pod network (its own IP, behind its Service), so it binds 0.0.0.0 where
`up` binds the router node's address; the replicas it finds are hostNetwork pods, reached at
their node's address on the replicas' port, as `up`'s router reaches them.
"""

from __future__ import annotations

from dataclasses import replace

from sparkctl.engines.base import Readiness
from sparkctl.export import k8s_gateway as gateway
from sparkctl.export.k8s_pod import PodParts, quantity, secret_mounts
from sparkctl.planning.gateway import GatewaySpec
from sparkctl.planning.hardening import bind_host, binds_everywhere
from sparkctl.planning.model import Plan, RankSpec
from sparkctl.planning.router import discovery_argv
from sparkctl.profile.schema import Profile

POD_HOST = "0.0.0.0"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


def leader_selector(lws_name: str) -> dict[str, str]:
    """The pods that serve a replica's API: worker index 0 of every group of the LeaderWorkerSet."""
    return {LWS_NAME_LABEL: lws_name, LWS_WORKER_INDEX_LABEL: "0"}


def _meta(name: str, namespace: str, labels: dict[str, str]) -> dict:
    return {"name": name, "namespace": namespace, "labels": dict(labels)}


def rbac(name: str, namespace: str, labels: dict[str, str]) -> list[dict]:
    """ServiceAccount + Role (get/list/watch pods, this namespace only) + RoleBinding."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, namespace, labels)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(name, namespace, labels),
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(name, namespace, labels),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    ]


def _argv(profile: Profile, plan: Plan, lws_name: str, namespace: str, static: bool) -> list[str]:
    assert plan.router is not None
    if static:  # the plan's own argv: its worker URLs, bound where `up` binds it, on the host network
        return list(plan.router.argv)
    port, gate = plan.groups[0].endpoint.port, plan.router.gateway
    if gate is not None:  # behind its gateway, as `up` runs it: on the pod's loopback
        return discovery_argv(
            profile, gate.upstream_host, leader_selector(lws_name), port, namespace, gate.upstream_port
        )
    return discovery_argv(profile, POD_HOST, leader_selector(lws_name), port, namespace)


def _gateway(router: RankSpec, static: bool) -> GatewaySpec | None:
    """The router's gateway as its pod runs it: on the pod's own address in the pod network."""
    gate = router.gateway
    return gate if gate is None or static else replace(gate, listen=POD_HOST)


def router_pod(
    profile: Profile,
    plan: Plan,
    secret: str,
    readiness: Readiness,
    argv: list[str],
    static: bool,
    service: str | None = None,
) -> dict:
    router = plan.router
    assert router is not None
    port, gate = profile.engine.port, _gateway(router, static)
    parts = PodParts()
    secret_mounts(router, secret, parts)
    if router.options.shm_size:
        size = quantity(router.options.shm_size)
        parts.add(
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": size}},
            {"name": "dshm", "mountPath": "/dev/shm"},
        )
    node = profile.node(router.node)
    host = {} if not static or binds_everywhere(profile) else {"host": bind_host(profile, node, 0)}
    container = {
        "name": "router",
        "image": router.image,
        "imagePullPolicy": "IfNotPresent",
        "command": argv,
        "ports": [] if gate else [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {**host, "path": readiness.health_path, "port": port},
            "periodSeconds": 5,
            "timeoutSeconds": 5,
        },
        "securityContext": {"privileged": False, "allowPrivilegeEscalation": False},
        "volumeMounts": parts.mounts,
    }
    term = {
        "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [router.node]}]
    }
    if static:
        nodes: dict = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        where: dict = {
            "hostNetwork": True,
            "dnsPolicy": "ClusterFirstWithHostNet",
            "automountServiceAccountToken": False,
        }
    else:
        nodes = {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": term}]}
        where = {"serviceAccountName": router_name(profile, service)}
    if not container["ports"]:
        del container["ports"]
    containers, volumes = [container], parts.volumes
    if gate is not None:
        side, side_volumes = gateway.sidecar(router_name(profile, service), gate, secret)
        containers, volumes = [container, side], [*volumes, *side_volumes]
    return {**where, "affinity": {"nodeAffinity": nodes}, "containers": containers, "volumes": volumes}


def router_name(profile: Profile, service: str | None = None) -> str:
    """The router's objects' name: sparkctl-<cluster>-router, a fleet's sparkctl-<cluster>-<service>-router."""
    return f"sparkctl-{profile.cluster}-{service + '-' if service else ''}router".lower()


def router_objects(
    profile: Profile,
    plan: Plan,
    lws_name: str,
    namespace: str,
    secret: str,
    readiness: Readiness,
    static: bool = False,
    service: str | None = None,
) -> list[dict]:
    """RBAC, the Deployment and its Service (on engine.port, the user's one endpoint). `static`:
    the replicas share a node, each on its own port: the router runs the plan's argv (its worker
    URLs) on that node's network, as `up` runs it, with no discovery (no RBAC) and a Service only
    when it binds every interface."""
    name = router_name(profile, service)
    labels = {"sparkctl.cluster": profile.cluster, **({"sparkctl.service": service} if service else {})}
    labels["sparkctl.role"] = "router"
    argv = _argv(profile, plan, lws_name, namespace, static)
    pod = router_pod(profile, plan, secret, readiness, argv, static, service)
    # A new router starts before the old one stops (the endpoint stays); on the host network both
    # would want the same port, so there the old one stops first.
    rolling = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, namespace, labels),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "strategy": {"type": "Recreate"} if static else rolling,
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, namespace, labels),
        "spec": {
            "selector": labels,
            "ports": [{"name": "http", "port": profile.engine.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    gate = _gateway(plan.router, static)
    config = [gateway.config_map(name, namespace, labels, gate)] if gate is not None else []
    if static:
        return [deployment, *([service] if binds_everywhere(profile) else []), *config]
    return [*rbac(name, namespace, labels), deployment, service, *config]
