"""SGLang's launch gate (`--gated-launch-port`): what it is in each release, and what a flag check
says when an image lacks it. Pure."""

from __future__ import annotations

from sparkctl.engines.base import LaunchGate
from sparkctl.engines.sglang.launch.inputs import parse_version

# SGLang 0.5.23 (srt/distributed/gated_launch.py, called from bootstrap.py before the memory it
# sizes its pools from is read): every rank blocks after init_distributed_environment; the first
# rank of the world serves /health and POST /gate/activate on --host:<port> (no key) and broadcasts
# "activated" to the others each second. Not read in older releases: they start ungated.
GATE = LaunchGate(
    flag="--gated-launch-port",
    health_path="/health",
    activate_path="/gate/activate",
    waiting_marker="Gated launch waiting for activation.",
    activated_marker="Gated launch activated.",
    release="0.5.23",
)


def launch_gate(version: str | None) -> LaunchGate | None:
    """The gate in this SGLang release: 0.5.23 and later (the release whose source was read)."""
    v = parse_version(version)
    return GATE if v is not None and v >= (0, 5, 23) else None


def missing_gate_fix(flag: str) -> str | None:
    """The fix when an image's parser lacks the gate sparkctl rendered (None: another flag)."""
    if flag != GATE.flag:
        return None
    return (
        "the image's SGLang has no launch gate (sparkctl adds it for memory.gated_start): set "
        "engine.sglang_version to the image's release, or memory.gated_start: false"
    )
