"""ImagePresent and ImageSame: the serving image is on every node, with one ID (and the pinned one);
RouterImage: the router's image on the router's node."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from sparkctl.facts.docker import ImageFacts, probe_image
from sparkctl.findings import Finding
from sparkctl.preflight.base import ERROR, OK, SKIP, WARN, Check, Ctx, NodeFacts, Task, probe_failure
from sparkctl.preflight.checks.docker import docker_tasks
from sparkctl.preflight.checks.router import OnRouterNode
from sparkctl.units import human_bytes

if TYPE_CHECKING:
    from sparkctl.planning.model import RankSpec


class _Images(Check):
    fast = True

    def probes(self, ctx: Ctx, node: str) -> dict[str, Task]:
        return docker_tasks(ctx, image=True)

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        from sparkctl.profile.derived import image_ref

        out: list[Finding] = []
        # Why a node's image is unknown is ImagePresent's to say (ImageSame's when it runs alone).
        if self.name == "ImagePresent" or not ctx.applies("ImagePresent"):
            out += _image_unknown(ctx, facts)
        ref, source = image_ref(ctx.profile)
        images = {
            n: f.get("image")
            for n, f in facts.items()
            if "docker" not in f.errors and "image" not in f.errors
        }
        found = check_images(ref, images, ctx.rank0, ctx.profile.image.id, source)
        run = _launcher(ctx)
        found = [_overrides(x, images.get(x.node), run) if x.severity == OK else x for x in found]
        return out + [x for x in found if x.check == self.name]


def _launcher(ctx: Ctx) -> list[str]:
    from sparkctl.engines import get_engine

    size = len(ctx.profile.engine.command or get_engine(ctx.profile.engine.kind).default_command)
    return ctx.plan.ranks[0].argv[:size]


def _overrides(found: Finding, img: ImageFacts | None, launcher: list[str]) -> Finding:
    """An ImagePresent OK line says what sparkctl runs in place of the image's ENTRYPOINT/CMD."""
    if found.check != "ImagePresent" or img is None:
        return found
    return replace(
        found,
        message=f"{found.message}; {override_note(img, launcher)}",
        data={**(found.data or {}), "entrypoint": list(img.entrypoint), "cmd": list(img.cmd)},
    )


def override_note(img: ImageFacts, launcher: list[str]) -> str:
    """What a rank's container runs, against what the image would run by itself."""
    own = f"ENTRYPOINT {list(img.entrypoint)}" if img.entrypoint else "(no ENTRYPOINT)"
    return f"ranks run `{' '.join(launcher)} ...` in place of the image's {own} CMD {list(img.cmd)}"


def _image_unknown(ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
    out = []
    for n, f in facts.items():
        if "image" in f.errors:
            out.append(probe_failure("ImagePresent", n, f.errors["image"]))
        elif "docker" in f.errors and not ctx.applies("DockerEngine"):
            out.append(probe_failure("ImagePresent", n, f.errors["docker"]))
        elif "docker" in f.errors:
            out.append(Finding("ImagePresent", SKIP, "skipped: Docker engine not reachable", node=n))
    return out


class ImagePresent(_Images):
    name = "ImagePresent"
    summary = "the serving image is present on every node"
    order = 90


class ImageSame(_Images):
    name = "ImageSame"
    summary = "the image has the same ID on every node (and the pinned image.id)"
    order = 100
    skip_when_unreachable = False  # judged across the nodes that answered


def check_images(
    ref: str, images: Mapping[str, ImageFacts | None], rank0: str, pinned: str | None, source: str
) -> list[Finding]:
    """ImagePresent per node, then ImageSame across the nodes that have it (and vs image.id)."""
    out: list[Finding] = []
    have = {n: i for n, i in images.items() if i is not None}
    donor = rank0 if rank0 in have else next(iter(have), None)
    for node, img in images.items():
        if img is None:
            if donor:
                fix = f"`sparkctl ship --image --to {node}` (copies it from {donor})"
            elif source.startswith("recipe:"):
                fix = f"build it: `sparkctl image build {source.split(':', 1)[1]}`, then `sparkctl ship --image`"
            else:
                fix = f"`docker pull {ref}` on one node, then `sparkctl ship --image`"
            out.append(Finding("ImagePresent", ERROR, f"image {ref} not on {node}", fix, node=node))
        else:
            out.append(
                Finding(
                    "ImagePresent",
                    OK,
                    f"{ref} {img.id[:19]} ({human_bytes(img.size)})",
                    node=node,
                    data={"id": img.id, "size": img.size},
                )
            )
    if not have:
        return out
    want = pinned or (have[donor].id if donor else None)
    why = "image.id in the profile" if pinned else f"{donor} (rank 0)" if donor == rank0 else donor
    for node, img in have.items():
        if img.id == want:
            out.append(Finding("ImageSame", OK, f"same ID as {why}", node=node))
            continue
        ref_img = have.get(donor) if donor else None
        same_content = (
            ref_img is not None
            and img.layers
            and img.layers == ref_img.layers
            and img.created == ref_img.created
        )
        if same_content and not pinned:
            out.append(
                Finding(
                    "ImageSame",
                    WARN,
                    f"{ref} on {node} has ID {img.id[:19]}, {why} has {want[:19]} "
                    "but the same layers (different image store/snapshotter?)",
                    "use the same Docker storage driver on every node",
                    node=node,
                )
            )
            continue
        fix = (
            f"`sparkctl ship --image --to {node}` to replace it with {donor}'s copy"
            if not pinned
            else f"rebuild or pull the pinned image, or update image.id (now {pinned[:19]})"
        )
        out.append(
            Finding(
                "ImageSame",
                ERROR,
                f"{ref} on {node} is {img.id[:19]}, {why} has {want[:19]}",
                fix,
                node=node,
                data={"id": img.id, "want": want},
            )
        )
    return out


class RouterImage(OnRouterNode):
    """The image the router runs from, on the router's node. ImagePresent covers it when it is the
    serving image on a node that holds a rank; not a separate `router.image`, nor a router node
    that holds no rank."""

    name = "RouterImage"
    summary = "the router's image is on the router's node (modes with replicas)"
    order = 95
    fast = True

    def applies(self, ctx: Ctx) -> bool:
        router = ctx.plan.router
        return router is not None and (
            router.image != ctx.plan.ranks[0].image or router.node not in ctx.nodes
        )

    def router_probes(self, ctx: Ctx, router: RankSpec) -> dict[str, Task]:
        ref = router.image
        return {
            **docker_tasks(ctx),
            f"image:{ref}": Task(lambda conn, _: probe_image(conn, ref), after="docker"),
        }

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        got = self.router_facts(ctx, facts)
        if got is None:
            return []
        (router, f), out = got, []
        key = f"image:{router.image}"
        if ctx.failed(out, "docker", self.name, f) or ctx.failed(out, key, self.name, f):
            return out
        serving = router.image == ctx.plan.ranks[0].image
        return [check_router_image(router.node, router.image, f.get(key), serving)]


def check_router_image(node: str, ref: str, img: ImageFacts | None, serving: bool) -> Finding:
    """Present: OK with its ID. Absent: an error naming the node, with the way to get it there."""
    if img is not None:
        return Finding("RouterImage", OK, f"router image {ref} {img.id[:19]}", node=node, data={"id": img.id})
    fix = (
        f"`sparkctl ship --image --to {node}` (the router runs from the serving image)"
        if serving
        else f"`docker pull {ref}` on {node}, or set router.image to an image {node} has"
    )
    return Finding("RouterImage", ERROR, f"router image {ref} not on {node}", fix, node=node)
