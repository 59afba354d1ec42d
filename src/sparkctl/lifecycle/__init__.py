"""Lifecycle of a cluster's serving containers: up, down, switch, status, logs (docs/operations.md).

Modules: containers (RankSpec -> Docker API), readiness (endpoint probes), watch (wait while
watching every rank), lock (one operation per cluster), logs (persistent per-rank files),
up/down/status (the operations).
"""
