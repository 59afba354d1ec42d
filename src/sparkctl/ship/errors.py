"""Ship failures: each names the node and says what to do (rerun resumes where it stopped)."""

from __future__ import annotations

from sparkctl.errors import SparkctlError

RERUN = "rerun `sparkctl ship`: what already arrived intact is kept and not sent again"


class ShipError(SparkctlError):
    """A transfer could not start or did not complete."""


class SourceMissingError(ShipError):
    """The source node lacks the image or the weights to ship."""


class LoadRefusedError(ShipError):
    """The peer's `docker load` read the whole stream and refused it (not a broken link)."""


class DiskFullError(ShipError):
    """The peer has (or ran out of) too little disk; partial files were removed."""
