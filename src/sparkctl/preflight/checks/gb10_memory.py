"""Gb10VisibleMemory: nothing in modprobe.d cuts the GPU's view of a GB10's unified memory.

A `zz-nvidia-drm-override.conf` in modprobe.d has left CUDA seeing about 62 GB of a GB10's 128
(reported on two-Spark deployments): the engine then sizes its pools from half the box, and every
budget sparkctl and the engine compute is wrong by half. Found by its file (the options lines are
shown), on the unified-memory nodes only.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkctl.facts.modprobe import OVERRIDE, modprobe_probe
from sparkctl.facts.probe import Probe
from sparkctl.findings import Finding
from sparkctl.preflight.base import ERROR, OK, Check, Ctx, NodeFacts, probe_failure
from sparkctl.preflight.checks.gpus import gpu_probes
from sparkctl.preflight.checks.memory import unified


class Gb10VisibleMemory(Check):
    name = "Gb10VisibleMemory"
    summary = f"no {OVERRIDE} in modprobe.d on unified-memory nodes (CUDA would see about half the memory)"
    order = 82

    def probes(self, ctx: Ctx, node: str) -> dict[str, Probe]:
        return {**gpu_probes(), "modprobe": modprobe_probe()}

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        out: list[Finding] = []
        for node, f in facts.items():
            if not unified(ctx.profile, f):
                continue
            if "modprobe" in f.errors:
                out.append(probe_failure(self.name, node, f.errors["modprobe"]))
                continue
            out += check_modprobe(node, f.get("modprobe") or {})
        return out


def check_modprobe(node: str, files: Mapping[str, list[str]]) -> list[Finding]:
    found = {path: lines for path, lines in files.items() if path.rsplit("/", 1)[-1] == OVERRIDE}
    if not found:
        return [Finding("Gb10VisibleMemory", OK, f"no {OVERRIDE} in modprobe.d", node=node)]
    out = []
    for path, lines in found.items():
        shown = "; ".join(lines) or "empty"
        msg = (
            f"{path} is set ({shown}): on a GB10 it has left CUDA seeing about 62 GB of the 128 GB of "
            "unified memory, so the engine sizes its pools from half the box"
        )
        fix = (
            f"on {node}: `sudo rm {path} && sudo update-initramfs -u && sudo reboot`, then check that "
            "CUDA's total memory (torch.cuda.mem_get_info) is close to MemTotal"
        )
        out.append(
            Finding("Gb10VisibleMemory", ERROR, msg, fix, node=node, data={"file": path, "lines": lines})
        )
    return out
