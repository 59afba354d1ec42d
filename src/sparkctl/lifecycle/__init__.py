"""Lifecycle of a cluster's serving containers: up, down, switch, status, logs, supervision
(docs/operations.md).

Modules: containers (RankSpec -> Docker API), readiness (endpoint probes), watch (wait while
watching every rank), lock (one operation per cluster), state (last attempt, pending cleanup,
events), orphans (nodes lost mid-command), logs (persistent per-rank files), up/down/status/
preview (the operations), supervisor + supervise (group restarts).
"""
