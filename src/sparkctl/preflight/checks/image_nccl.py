"""ImageNccl: NCCL settings and libraries baked into the serving image, on every node.

An `/etc/nccl.conf` with `NCCL_IB_USE_INLINE=1` froze an engine's NCCL warm-up; an `NCCL_*` in the
image's env silently steers every rank; a pip NCCL beside a different system `libnccl` wedged
collectives for minutes. NCCL reads its environment first and the conf file only for variables
the environment leaves unset, so a key the plan's rank env sets is overridden (said, not an error);
others are in force: a warning, an error for keys known to hang or misroute NCCL.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkctl.engines import get_engine
from sparkctl.facts.nccl_image import ImageNcclFacts, host_nccl_probe, probe_image_nccl
from sparkctl.findings import Finding
from sparkctl.preflight.base import ERROR, OK, SKIP, WARN, Check, Ctx, NodeFacts, Task
from sparkctl.preflight.checks.docker import docker_tasks

# Known to hang, misroute or slow NCCL when set by an image for a cluster it was not built for.
DANGEROUS = {
    "NCCL_IB_USE_INLINE",
    "NCCL_IB_HCA",
    "NCCL_SOCKET_IFNAME",
    "NCCL_IB_GID_INDEX",
    "NCCL_IB_DISABLE",
    "NCCL_NET",
    "NCCL_P2P_DISABLE",
    "NCCL_SHM_DISABLE",
    "NCCL_PROTO",
    "NCCL_ALGO",
    "NCCL_IB_TIMEOUT",
    "NCCL_NET_GDR_LEVEL",
}


class ImageNccl(Check):
    name = "ImageNccl"
    summary = (
        "no stray /etc/nccl.conf or NCCL_* in the image; one NCCL build in it, on its host and on every node"
    )
    order = 93

    def probes(self, ctx: Ctx, node: str) -> dict[str, Task]:
        from sparkctl.profile.derived import image_ref

        ref = image_ref(ctx.profile)[0]

        def read(conn, got):  # after "image" in the same chain (tasks run in the order named)
            return None if got.get("image") is None else probe_image_nccl(conn, ref)

        return {
            **docker_tasks(ctx, image=True),
            "image_nccl": Task(read, after="docker"),
            "host_nccl": host_nccl_probe(),
        }

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        out: list[Finding] = []
        seen: dict[str, ImageNcclFacts] = {}
        nccl_env = get_engine(ctx.profile.engine.kind).nccl_library_env
        for node, f in facts.items():
            if ctx.failed(out, "docker", self.name, f) or ctx.failed(out, "image_nccl", self.name, f):
                continue
            got = f.get("image_nccl")
            if got is None:
                out.append(Finding(self.name, SKIP, "skipped: the image is not on this node", node=node))
                continue
            env = {k: str(v) for r in ctx.plan.ranks if r.node == node for k, v in r.env.items()}
            uses = ctx.plan.tp * ctx.plan.pp > 1
            out += judge_image(node, got, env, uses_nccl=uses, nccl_library_env=nccl_env)
            host = f.get("host_nccl")  # not read (no sh, no find): nothing to compare, said by no one
            if isinstance(host, ImageNcclFacts):
                out += judge_host(node, host, got, uses_nccl=uses)
            seen[node] = got
        return out + judge_versions(seen)


def judge_image(
    node: str,
    got: ImageNcclFacts,
    plan_env: Mapping[str, str],
    uses_nccl: bool = True,
    nccl_library_env: str | None = None,
) -> list[Finding]:
    """`uses_nccl`: the mode's replicas span several GPUs (one GPU each: a setting is only a warning).
    `nccl_library_env`: the engine's variable naming the libnccl its own wrapper loads, if any."""
    out: list[Finding] = []
    data = got.to_json()
    baked = [(f"{path}", k, v) for path, keys in got.conf.items() for k, v in keys.items()]
    baked += [("the image's env", k, v) for k, v in got.env.items() if k.startswith("NCCL_")]
    for where, key, value in baked:
        if key in plan_env:
            msg = f"{where} sets {key}={value}; overridden: the plan sets {key}={plan_env[key]} on every rank here"
            out.append(Finding("ImageNccl", OK, msg, node=node, data=data))
            continue
        sev = ERROR if key in DANGEROUS and uses_nccl else WARN
        msg = (
            f"{where} sets {key}={value}, in force on every rank (NCCL reads it when the env leaves it unset)"
        )
        msg += "" if uses_nccl else "; unused while every replica runs on one GPU"
        fix = (
            f"remove it from the image, or override it: engine.env: {{{key}: <value>}} "
            "(the environment wins over nccl.conf and the image's env)"
        )
        out.append(Finding("ImageNccl", sev, msg, fix, node=node, data=data))
    sys_v, pip_v = set(got.system.values()), set(got.pip.values())
    if sys_v and pip_v and sys_v != pip_v:
        pip_path = next(iter(got.pip)).rsplit("/", 1)[0] + "/nvidia/nccl/lib/libnccl.so.2"
        msg = (
            f"two NCCLs in the image: system libnccl {', '.join(sorted(sys_v))} and pip nvidia-nccl "
            f"{', '.join(sorted(pip_v))}; torch loads pip's, a loader of `libnccl.so.2` (the engine's "
            "own NCCL wrapper) may load the system's"
        )
        fix = "remove one from the image" + (
            f", or point the engine's NCCL library at pip's: engine.env: {{{nccl_library_env}: {pip_path}}}"
            if nccl_library_env
            else ""
        )
        out.append(Finding("ImageNccl", WARN, msg, fix, node=node, data=data))
    if not out or all(f.severity is OK for f in out):
        versions = ", ".join(sorted(got.versions)) or "none found"
        out.insert(
            0,
            Finding(
                "ImageNccl",
                OK,
                f"no NCCL settings in force from the image; NCCL {versions}",
                node=node,
                data=data,
            ),
        )
    return out


def _short(digests: set[str]) -> str:
    return "/".join(sorted(d[:12] for d in digests))


HUNG = "TP=2 over two builds of one version has hung after about 20 minutes of load (vllm #41725, #42354)"


def judge_host(
    node: str, host: ImageNcclFacts, image: ImageNcclFacts, uses_nccl: bool = True
) -> list[Finding]:
    """The image's NCCL against the host's, by build (sha256 of the library), not by version."""
    out: list[Finding] = []
    mine, theirs = image.identities, host.identities
    for version in sorted(set(mine) & set(theirs) - {"unknown version"}):
        if mine[version] & theirs[version]:
            continue
        msg = (
            f"NCCL {version} in the image (sha256 {_short(mine[version])}) and on the host "
            f"(sha256 {_short(theirs[version])}) are different builds of one version: {HUNG}"
        )
        fix = (
            "use one build: install the image's NCCL on the host (or build the image on the host's), "
            "then run preflight again; the version string alone does not tell them apart"
        )
        sev = ERROR if uses_nccl else WARN
        out.append(
            Finding("ImageNccl", sev, msg, fix, node=node, data={"image": image.builds, "host": host.builds})
        )
    return out


def judge_versions(seen: Mapping[str, ImageNcclFacts]) -> list[Finding]:
    per = {n: ",".join(sorted(g.versions)) for n, g in seen.items() if g.versions}
    if len(set(per.values())) >= 2:
        where = ", ".join(f"{n} {v}" for n, v in per.items())
        msg = f"the image's NCCL differs across nodes ({where}): ranks would run different NCCLs"
        fix = "ship one image to every node (`sparkctl ship --image`) and pin image.id"
        return [Finding("ImageNccl", ERROR, msg, fix, node=next(iter(per)), data={"versions": per})]
    builds = {n: {v: _short(d) for v, d in g.identities.items()} for n, g in seen.items() if g.builds}
    if len({tuple(sorted(b.items())) for b in builds.values()}) < 2:
        return []
    where = "; ".join(
        f"{n}: " + ", ".join(f"{v} sha256 {d}" for v, d in sorted(b.items())) for n, b in builds.items()
    )
    msg = f"the image's NCCL is one version but different builds across nodes ({where}): {HUNG}"
    fix = "ship one image to every node (`sparkctl ship --image`) and pin image.id"
    return [Finding("ImageNccl", ERROR, msg, fix, node=next(iter(builds)), data={"builds": builds})]
