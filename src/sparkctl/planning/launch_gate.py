"""A gated start of a replica group (memory.gated_start): which groups, on which port, and what the
plan says about it. Pure.

A group of several nodes is gated when the profile asks for it and the engine's release has a launch
gate (`Engine.launch_gate`): every rank blocks after the distributed rendezvous, before the engine
reads the memory it sizes its pools from; `up` runs admission on every node of the group at that
moment and opens the gate only when all are admitted (a refusal stops every rank: nothing has
allocated GPU memory). A group on one node, or an engine or release without a gate, starts as before.
"""

from __future__ import annotations

from sparkctl.engines.base import Engine, LaunchGate
from sparkctl.planning.model import GateSpec
from sparkctl.profile.schema import Profile
from sparkctl.profile.topology import Group

WILDCARD = ("0.0.0.0", "::", "[::]")
LOOPBACKS = ("127.0.0.1", "localhost", "::1", "[::1]")


def group_gate(profile: Profile, engine: Engine, group: Group) -> LaunchGate | None:
    """The gate this group starts behind (None: ungated, as before)."""
    if not profile.memory.gated_start or group.nnodes < 2:
        return None
    return engine.launch_gate(profile)


def gate_spec(group: Group, gate: LaunchGate, head_host: str) -> GateSpec:
    """Where the gate listens: rank 0's --host and the group's gate port; sparkctl asks it from the
    head's own node (loopback when it binds loopback or every address)."""
    reach = "127.0.0.1" if head_host in WILDCARD or head_host in LOOPBACKS else head_host
    return GateSpec(
        group.head.node, head_host, group.gate_port, reach, list(dict.fromkeys(group.nodes)), gate
    )


def gate_notes(profile: Profile, engine: Engine, gates: list[GateSpec | None], multi: bool) -> list[str]:
    """What `plan` notes: the gate of each gated group; a gate asked for that this engine's release
    lacks (the groups then start as before)."""
    if not profile.memory.gated_start or not multi:
        return []
    out = [f"replica {i} starts gated: {g.describe()}" for i, g in enumerate(gates) if g is not None]
    if not any(gates):
        key = engine.images.version_key if engine.images else None
        version = profile.engine.options.get(key) if key else None
        which = f"{engine.name} {version}" if version else engine.name + (" (release unknown)" if key else "")
        fix = f"; set engine.options.{key} to the image's release" if key and not version else ""
        out.append(
            f"memory.gated_start: {which} has no launch gate sparkctl knows: the groups start "
            f"ungated (admission before the start only){fix}"
        )
    return out


def gate_warnings(gates: list[GateSpec | None]) -> list[str]:
    """The security note: a gate on an address others reach (its activation takes no key)."""
    out = []
    for g in gates:
        if g is not None and g.host not in LOOPBACKS:
            out.append(
                f"the launch gate on {g.node} listens on {g.host}:{g.port} and its "
                f"{g.protocol.activate_path} takes no key: anyone who reaches it can open it before "
                "admission (keep engine.gateway on: rank 0 then binds 127.0.0.1)"
            )
    return out
