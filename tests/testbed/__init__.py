"""Real multi-node testbed: network namespaces + sshd + dockerd per node (see docs/testbed.md)."""

from tests.testbed.lab import Lab, LabError, LabNode, list_labs, missing_prerequisites

__all__ = ["Lab", "LabError", "LabNode", "list_labs", "missing_prerequisites"]
