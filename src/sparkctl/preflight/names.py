"""Stable preflight check names, what each one prevents, and the subset `up` runs first.

Names never change once released: users put them in `--ignore` and scripts read them from
`--json`. docs/preflight.md documents every one with the symptom it prevents.
"""

from __future__ import annotations

import difflib

from sparkctl.errors import UsageError

# name -> one line: what it checks (the docs say which symptom it prevents).
CHECKS: dict[str, str] = {
    "SshReachable": "every node of the mode accepts our SSH key (passwordless) with a known host key",
    "SshRank0ToPeer": "rank 0 can SSH to every peer over the fabric (the engine's rendezvous path)",
    "FabricNetdev": "each fabric netdev exists, is up and holds the node's fabric IP",
    "Mtu": "each fabric netdev has the profile's MTU",
    "PingDf": "a don't-fragment ping of MTU-28 bytes crosses the fabric in both directions",
    "RoceHca": "named RoCE devices exist, are ACTIVE, bound to the fabric netdev, with a GID for the IP",
    "DockerEngine": "the node's Docker engine answers (and has the NVIDIA runtime when GPUs are requested)",
    "Gpus": "GPUs visible with nvidia-smi: count, model, memory, compute capability; no drift",
    "ImagePresent": "the serving image is present on every node",
    "ImageSame": "the image has the same ID on every node (and the pinned image.id)",
    "Weights": "target and draft snapshots are present on every node, same revision",
    "WeightsContent": "every snapshot file has the same sha256 as on rank 0 (hashes cached on the nodes)",
    "DiskFree": "enough free disk for what would have to be shipped",
    "PortFree": "the HTTP port and the dist-init port are free on rank 0",
    "StrayContainers": "no container with sparkctl labels or the planned names that is not the plan's",
    "UnifiedMemory": "on unified-memory nodes (GB10), MemAvailable covers what the model needs",
    "HostIpReachable": "each rank's SGLANG_HOST_IP is assigned on its node and reachable from the peers",
    "Launch": "launch-safety rules of sparkctl.launch (flags, GPU arch, memory), when available",
    "Security": "no keyless API on every interface, no --privileged, pinned revisions, secret files 0400",
}

# Findings some checks emit under a more precise name; --only/--ignore of the group covers them.
ALIASES: dict[str, str] = {"DriverDrift": "Gpus", "CudaDrift": "Gpus", "GpuArchDrift": "Gpus",
                           **{n: "Security" for n in ("ApiExposure", "Privileged", "RemoteCode",
                                                      "UnpinnedRevision", "SecretFileMode")}}  # fmt: skip

# The quick subset `up` runs before starting anything (all within about a second on a LAN).
FAST_CHECKS: frozenset[str] = frozenset(
    {
        "SshReachable",
        "DockerEngine",
        "ImagePresent",
        "ImageSame",
        "Weights",
        "PortFree",
        "StrayContainers",
        "Mtu",
        "Security",
    }
)


def group_of(check: str) -> str:
    return ALIASES.get(check, check)


def validate_names(names: set[str] | frozenset[str], option: str, extra: set[str] | None = None) -> set[str]:
    """Check user-given names (case-insensitive); 'all' means every check. Unknown -> UsageError."""
    known = {**{n.lower(): n for n in CHECKS}, **{n.lower(): n for n in ALIASES}}
    known |= {n.lower(): n for n in extra or set()}
    out: set[str] = set()
    for name in names:
        if name.lower() == "all":
            out |= set(CHECKS)
            continue
        canon = known.get(name.lower())
        if canon is None:
            near = difflib.get_close_matches(name, [*CHECKS, *ALIASES], n=1, cutoff=0.5)
            raise UsageError(
                f"{option}: unknown check '{name}'",
                fix=(f"did you mean '{near[0]}'? " if near else "")
                + f"checks: {', '.join(CHECKS)} (or 'all')",
            )
        out.add(canon)
    return out
