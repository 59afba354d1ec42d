"""Exports of the plan to other schedulers: `export k8s` (Kubernetes manifests, docs/kubernetes.md).

Pure renderers over the plan `up` executes (planning/); nothing here reaches a node or a cluster,
except `k8s_secret`, which reads the secret values for `--secrets` the way `up` does.
"""
