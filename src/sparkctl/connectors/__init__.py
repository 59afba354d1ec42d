"""Connectors: one interface (run, stream, popen, put, get, docker) for local and SSH nodes."""

from sparkctl.connectors.base import Connector, RunResult
from sparkctl.connectors.pool import NodePool, connector_for

__all__ = ["Connector", "NodePool", "RunResult", "connector_for"]
