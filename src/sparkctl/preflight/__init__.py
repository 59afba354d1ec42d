"""`sparkctl preflight`: every node and fabric check, kubeadm-style (docs/preflight.md).

API for other commands: `run_preflight(profile, plan, pool, only=FAST_CHECKS)` -> `Report`;
discovery probes for `sparkctl init` live in `sparkctl.preflight.probes` and `.rdma`.
"""

from sparkctl.preflight.names import CHECKS, FAST_CHECKS, validate_names
from sparkctl.preflight.runner import Report, run_preflight

__all__ = ["CHECKS", "FAST_CHECKS", "Report", "run_preflight", "validate_names"]
