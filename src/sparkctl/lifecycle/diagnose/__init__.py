"""`sparkctl diagnose`: one masked tarball of a cluster's facts (collect.py the flow, probes.py
the node facts, mask.py what must never be inside, bundle.py the tarball and its manifest)."""

from sparkctl.lifecycle.diagnose.collect import Diagnosis, diagnose

__all__ = ["Diagnosis", "diagnose"]
