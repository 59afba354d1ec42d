"""The gateway in the exported pods (pure): the same HAProxy, config and key check `up` runs beside
rank 0 and the router (planning/gateway.py), as a second container of the leader pod (host
network: the engine on 127.0.0.1, the gateway on the API's address, as `up` runs them) and of the
router's pod. Its config is a ConfigMap; its key hashes are a key of the Secret `--secrets` prints.

Not carried: the squatter check (the engine's uid is the image's, unknown here); on a node where
other tenants run hostNetwork pods, one could bind the engine's loopback port first (docs/kubernetes.md).
"""

from __future__ import annotations

import posixpath

from sparkctl.planning.gateway import (
    CONFIG_PATH,
    KEYS_PATH,
    NAMES_PATH,
    UPSTREAM_PATH,
    GatewaySpec,
    haproxy_config,
)

CONFIG_KEY = posixpath.basename(CONFIG_PATH)
KEYS_KEY = posixpath.basename(KEYS_PATH)
SECRET_MODE = 0o444  # sha256 hashes of the keys, read by the gateway's non-root user
GATEWAY_UID = 65534  # nobody: the gateway needs no file of its own
# What one gateway may hold (bench/gateway.py --exhaust measured its RSS under 1000 idle sockets,
# 300 slow clients and a 1 GB body; HAProxy's buffers are bounded by the config's tune.bufsize).
LIMITS = {"cpu": "2", "memory": "512Mi"}
REQUESTS = {"cpu": "100m", "memory": "64Mi"}


def least_privilege() -> dict:
    """The gateway container's securityContext, as `up` runs it: no capability, no privilege,
    a read-only root, not root."""
    return {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": GATEWAY_UID,
        "runAsGroup": GATEWAY_UID,
        "capabilities": {"drop": ["ALL"]},
    }


def configmap_name(served: str) -> str:
    return f"{served}-gateway"


def config_map(served: str, namespace: str, labels: dict[str, str], spec: GatewaySpec) -> dict:
    """haproxy.cfg for `spec`, without the owner check (see the module's doc)."""
    meta = {"name": configmap_name(served), "namespace": namespace, "labels": dict(labels)}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {CONFIG_KEY: haproxy_config(spec)},
    }


def sidecar(served: str, spec: GatewaySpec, secret: str | None) -> tuple[dict, list[dict]]:
    """(the gateway's container, the volumes it needs) in the pod of `served` (an object's name)."""
    config_vol = f"{served}-gateway-config"[:63]
    volumes = [{"name": config_vol, "configMap": {"name": configmap_name(served)}}]
    mounts = [{"name": config_vol, "mountPath": CONFIG_PATH, "subPath": CONFIG_KEY, "readOnly": True}]
    if spec.keyed:
        assert secret is not None, "a keyed gateway needs the Secret"
        keys_vol = f"{served}-gateway-keys"[:63]
        # with named keys also the names map and the engine's own header (upstream.map: the one
        # raw key, the engine's, as up places it), which the config reads
        paths = [KEYS_PATH, *((NAMES_PATH, UPSTREAM_PATH) if spec.named else ())]
        items = [{"key": posixpath.basename(p), "path": posixpath.basename(p)} for p in paths]
        volumes.append(
            {"name": keys_vol, "secret": {"secretName": secret, "items": items, "defaultMode": SECRET_MODE}}
        )
        mounts += [
            {"name": keys_vol, "mountPath": p, "subPath": posixpath.basename(p), "readOnly": True}
            for p in paths
        ]
    container = {
        "name": "gateway",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["haproxy", "-db", "-f", CONFIG_PATH],
        "ports": [{"name": "http", "containerPort": spec.port, "protocol": "TCP"}],
        "resources": {"requests": dict(REQUESTS), "limits": dict(LIMITS)},
        "securityContext": least_privilege(),
        "volumeMounts": mounts,
    }
    return container, volumes
