"""`sparkctl preflight`: every node and fabric check, kubeadm-style (docs/preflight.md).

API for other commands: `run_preflight(profile, plan, pool, only=FAST_CHECKS)` -> `Report`.
A check is one `Check` class under preflight/checks/ (see base.py); the registry derives the
names from the classes.
"""

from sparkctl.preflight.registry import CHECKS, FAST_CHECKS, validate_names
from sparkctl.preflight.runner import Report, run_preflight

__all__ = ["CHECKS", "FAST_CHECKS", "Report", "run_preflight", "validate_names"]
