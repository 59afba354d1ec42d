"""The fleet's one endpoint in `export k8s` of a fleet (pure; docs/kubernetes.md "A fleet"): the
HAProxy config `up` runs (planning/fleet_gateway.py, rendered by its own functions), routing each
request by its `model` to that service's in-cluster Service (its `<lws>-api` Service, or its
router's) instead of a node's address. A Deployment (1 replica, in the pod network), its Service
`sparkctl-<cluster>-gateway` on `gateway.port`, and a ConfigMap of the gateway's files.

Keys: the front's hashes are the services' own `keys.sha256`, from each service's Secret (what
`--secrets` prints), joined into one file by an init container on a memory emptyDir. No Secret of
its own: the front takes exactly the keys the services' gateways check, and nothing new holds a
key. The same file is the operators' (the services' engine keys, as `up` plans them).

Not carried: on_demand and idle_stop (nothing starts or stops a service here: no route waits;
scale-to-zero is KEDA's job), and named keys (engine.api_keys: the Secrets hold no hash of them).
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass

from sparkctl.errors import UsageError
from sparkctl.export import k8s_gateway as sidecar
from sparkctl.export.k8s import K8sExport
from sparkctl.planning.fleet_gateway import OPERATORS_PATH, FleetGatewaySpec, FleetRoute, fleet_files
from sparkctl.planning.fleet_gateway_container import fleet_gateway_name
from sparkctl.planning.gateway import CONFIG_PATH, HEALTH_ROUTE, KEYS_PATH
from sparkctl.profile.fleet import gateway_node
from sparkctl.profile.schema import Profile
from sparkctl.secrets import SecretRef

POD_HOST = "0.0.0.0"  # the pod's own address in the pod network, behind its Service
HASHES_IN = "/run/sparkctl-key-hashes"  # each service's keys.sha256, as <service>.sha256
HASHES_OUT = "/run/sparkctl-keys"  # the joined file (an emptyDir in memory)
FILE = "gateway.yaml"  # no service's file (<service>-<mode>.yaml) has this name


@dataclass(frozen=True)
class FleetGatewayExport:
    spec: FleetGatewaySpec
    docs: list[dict]  # Deployment, Service, ConfigMap
    notes: list[str]


def upstream(one: K8sExport) -> tuple[str, int]:
    """The service's API inside the cluster: its last Service's DNS name (the router's when there
    is one) and port; with none (a router on the host network), the node address its plan binds."""
    services = [d for docs in one.objects.values() for d in docs if d["kind"] == "Service"]
    if not services:
        return one.plan.endpoint.host, one.plan.endpoint.port
    svc = services[-1]
    return f"{svc['metadata']['name']}.{one.namespace}.svc", svc["spec"]["ports"][0]["port"]


def service_key(one: K8sExport, view: Profile) -> SecretRef | None:
    """The key whose hash the service's Secret holds (its API gateway's); refused when the
    service takes a key that no gateway of its checks (its Secret then holds no hash)."""
    api = one.plan.router or one.plan.ranks[0]
    key = api.gateway.key if api.gateway is not None else None
    if key is None and view.engine.api_key is not None:
        raise UsageError(
            f"service {one.service}: its engine.api_key is checked by no gateway, so its Secret holds "
            "no hash for the fleet's gateway",
            fix=f"set models.{one.service}.engine.gateway: true",
        )
    return key


def gateway_spec(profile: Profile, outs: list[K8sExport], keys: list[SecretRef]) -> FleetGatewaySpec:
    """The fleet gateway over the exported services: each route to its Service, none on demand."""
    routes = tuple(
        FleetRoute(one.service or "", (one.plan.endpoint.served_model_name,), (upstream(one),), False)
        for one in outs
    )
    keys = list(dict.fromkeys(keys))
    return FleetGatewaySpec(
        node=gateway_node(profile),
        listen=POD_HOST,
        port=profile.gateway.port,
        routes=routes,
        keyed=bool(keys),
        keys=tuple(keys),
        operators=tuple(keys),  # the services' engine keys: what each Secret's hash is of
        wait_s=0,  # nothing starts a stopped service here: a request never waits
    )


def _key_hashes(spec: FleetGatewaySpec, keyed: list[K8sExport]) -> tuple[list[dict], list[dict], list[dict]]:
    """(the init container joining the services' hashes, the volumes, the gateway's mounts)."""
    if not spec.keyed:
        return [], [], []
    sources = [
        {
            "secret": {
                "name": o.secret_name,
                "items": [{"key": sidecar.KEYS_KEY, "path": f"{o.service}.sha256"}],
            }
        }
        for o in keyed
    ]
    volumes = [
        {"name": "key-hashes", "projected": {"sources": sources, "defaultMode": sidecar.SECRET_MODE}},
        {"name": "keys", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
    ]
    init = {
        "name": "join-key-hashes",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", f"cat {HASHES_IN}/*.sha256 > {HASHES_OUT}/{sidecar.KEYS_KEY}"],
        "resources": {"requests": dict(sidecar.REQUESTS), "limits": dict(sidecar.REQUESTS)},
        "securityContext": sidecar.least_privilege(),
        "volumeMounts": [
            {"name": "key-hashes", "mountPath": HASHES_IN, "readOnly": True},
            {"name": "keys", "mountPath": HASHES_OUT},
        ],
    }
    mounts = [  # one file, both checks: every key passes the front, the engine keys read the state
        {"name": "keys", "mountPath": path, "subPath": sidecar.KEYS_KEY, "readOnly": True}
        for path in (KEYS_PATH, OPERATORS_PATH)
    ]
    return [init], volumes, mounts


def _pod(name: str, spec: FleetGatewaySpec, files: dict[str, str], keyed: list[K8sExport]) -> dict:
    inits, volumes, key_mounts = _key_hashes(spec, keyed)
    mounts = [
        {"name": "config", "mountPath": path, "subPath": posixpath.basename(path), "readOnly": True}
        for path in files
    ]
    container = {
        "name": "gateway",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["haproxy", "-db", "-f", CONFIG_PATH],
        "ports": [{"name": "http", "containerPort": spec.port, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": HEALTH_ROUTE, "port": spec.port}, "periodSeconds": 5},
        "resources": {"requests": dict(sidecar.REQUESTS), "limits": dict(sidecar.LIMITS)},
        "securityContext": sidecar.least_privilege(),
        "volumeMounts": [*mounts, *key_mounts],
    }
    return {
        "automountServiceAccountToken": False,
        **({"initContainers": inits} if inits else {}),
        "containers": [container],
        "volumes": [{"name": "config", "configMap": {"name": name}}, *volumes],
    }


def _objects(profile: Profile, namespace: str, spec: FleetGatewaySpec, keyed: list[K8sExport]) -> list[dict]:
    name = fleet_gateway_name(profile.cluster)
    labels = {"sparkctl.cluster": profile.cluster, "sparkctl.role": "gateway"}
    meta = {"name": name, "namespace": namespace, "labels": labels}
    files = fleet_files(spec)
    digest = hashlib.sha256("".join(f"{p}\n{t}" for p, t in files.items()).encode()).hexdigest()[:16]
    template = {  # a changed config is a changed template: `kubectl apply` rolls the pod
        "metadata": {"labels": dict(labels), "annotations": {"sparkctl.config_hash": digest}},
        "spec": _pod(name, spec, files, keyed),
    }
    deployment = {  # in the pod network: the new pod is ready before the old one stops
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {**meta, "labels": dict(labels)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": dict(labels)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": template,
        },
    }
    port = {"name": "http", "port": spec.port, "targetPort": "http", "protocol": "TCP"}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {**meta, "labels": dict(labels)},
        "spec": {"selector": dict(labels), "ports": [port]},
    }
    data = {posixpath.basename(p): t for p, t in files.items()}
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {**meta, "labels": dict(labels)},
        "data": data,
    }
    return [deployment, service, config]


def _notes(profile: Profile, outs: list[K8sExport], spec: FleetGatewaySpec) -> list[str]:
    svc = f"Service {fleet_gateway_name(profile.cluster)} port {spec.port}"
    where = "; ".join(f"{r.names[0]} -> {r.service} at {h}:{p}" for r in spec.routes for h, p in r.upstreams)
    notes = [
        f"the fleet's single endpoint is rendered: {FILE}, {svc}, routing by the request's `model`: {where}. "
        "It resolves each Service's name when it starts (restarting until they exist) and routes to the "
        "exported modes only: after exporting another mode, apply its gateway.yaml too (the pod rolls)"
    ]
    demand = [n for n, m in (profile.models or {}).items() if m.on_demand or m.idle_stop is not None]
    notes.append(
        f"on_demand and idle_stop are not carried{' (set for ' + ', '.join(demand) + ')' if demand else ''}: "
        "nothing in Kubernetes starts or stops a service, so no request waits at the gateway (503 while "
        "a service's pods are not ready); scale-to-zero is KEDA's job (e.g. its HTTP add-on), not rendered"
    )
    named = [o.service or "" for o in outs if (g := (o.plan.router or o.plan.ranks[0]).gateway) and g.named]
    if named:
        notes.append(
            f"{', '.join(named)}: engine.api_keys do not pass the fleet's gateway (the services' Secrets "
            "hold the engine key's hash only): clients use the service's own Service"
        )
    return notes


def fleet_gateway(
    profile: Profile, namespace: str, outs: list[K8sExport], views: dict[str, Profile]
) -> FleetGatewayExport:
    """The fleet gateway's objects in front of the exported services (`views`: service -> its
    single-model profile)."""
    keys = {o.service or "": service_key(o, views[o.service or ""]) for o in outs}
    spec = gateway_spec(profile, outs, [k for k in keys.values() if k is not None])
    keyed = [o for o in outs if keys[o.service or ""] is not None]
    return FleetGatewayExport(spec, _objects(profile, namespace, spec, keyed), _notes(profile, outs, spec))
