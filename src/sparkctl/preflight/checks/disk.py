"""DiskFree: enough free disk for what `ship` would have to copy (image and weights), per filesystem."""

from __future__ import annotations

from collections.abc import Mapping

from sparkctl.facts.disk import DiskUsage, df_probe
from sparkctl.facts.probe import Probe
from sparkctl.findings import Finding
from sparkctl.preflight.base import ERROR, OK, Check, Ctx, NodeFacts, Task, probe_failure
from sparkctl.preflight.checks.docker import docker_tasks
from sparkctl.preflight.checks.weights import (
    du_followup,
    model_size,
    node_commits,
    repo_probes,
    snapshot_sizes,
    weights_findings,
)
from sparkctl.units import human_bytes


class DiskFree(Check):
    name = "DiskFree"
    summary = "enough free disk for what would have to be shipped"
    order = 130

    def probes(self, ctx: Ctx, node: str) -> dict[str, Probe | Task]:
        return {
            **repo_probes(ctx, node),
            "df:weights": df_probe(ctx.hf_cache(node)),
            **docker_tasks(ctx, image=True, df=True),
        }

    def followups(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> dict[str, dict[str, Probe]]:
        """Size a model on one node that has it when some other node lacks it."""
        out: dict[str, dict[str, Probe]] = {}
        for _, ref in ctx.model_refs():
            commits = node_commits(facts, ref.id, ref.revision)
            have = [n for n, c in commits.items() if c]
            if have and len(have) < len(facts):
                n = ctx.rank0 if ctx.rank0 in have else have[0]
                out.setdefault(n, {}).update(du_followup(ctx, n, ref.id, commits[n]))  # type: ignore[arg-type]
        return out

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        out: list[Finding] = []
        commits = weights_findings(ctx, facts)[1]
        sizes = snapshot_sizes(facts)
        have_image = {n: f.get("image") for n, f in facts.items() if f.get("image") is not None}
        donor = have_image.get(ctx.rank0) or next(iter(have_image.values()), None)
        for node, f in facts.items():
            needs: dict[str, tuple[int, DiskUsage]] = {}
            for df in ("df:image", "df:weights"):
                if df in f.errors:
                    out.append(probe_failure(self.name, node, f.errors[df]))
            image, df_img, df_w = f.get("image"), f.get("df:image"), f.get("df:weights")
            if df_img is not None:
                ship = donor.size if donor is not None and image is None else 0
                if image is not None and donor is not None and image.id != donor.id:
                    ship = donor.size
                needs["image"] = (ship, df_img)
            if df_w is not None:
                missing = [ref.id for _, ref in ctx.model_refs() if node not in commits.get(ref.id, {})]
                needs["weights"] = (sum(model_size(sizes, r) or 0 for r in missing), df_w)
            out += check_disk(node, needs)
        return out


def check_disk(node: str, needs: Mapping[str, tuple[int, DiskUsage]], margin: float = 1.1) -> list[Finding]:
    """DiskFree: what must be shipped (kind -> (bytes, filesystem)) vs free space, per filesystem."""
    by_mount: dict[str, tuple[int, DiskUsage, list[str]]] = {}
    for kind, (size, disk) in needs.items():
        total, _, kinds = by_mount.get(disk.mount, (0, disk, []))
        by_mount[disk.mount] = (total + size, disk, [*kinds, kind])
    out = []
    for mount, (size, disk, kinds) in by_mount.items():
        free = disk.avail_kib * 1024
        what = " + ".join(kinds)
        if size == 0:
            out.append(
                Finding(
                    "DiskFree",
                    OK,
                    f"{human_bytes(free)} free on {mount} ({what}: nothing to ship)",
                    node=node,
                )
            )
        elif size * margin > free:
            out.append(
                Finding(
                    "DiskFree",
                    ERROR,
                    f"{what} to ship need {human_bytes(size)}, only {human_bytes(free)} free on "
                    f"{mount} ({disk.path})",
                    f"free space on {node}:{mount} (`docker system prune`, "
                    "old HF snapshots) or move the cache",
                    node=node,
                    data={"need": size, "free": free},
                )
            )
        else:
            out.append(
                Finding(
                    "DiskFree",
                    OK,
                    f"{what} to ship {human_bytes(size)}, {human_bytes(free)} free on {mount}",
                    node=node,
                    data={"need": size, "free": free},
                )
            )
    return out
