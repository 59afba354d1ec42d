"""DockerEngine: the node's engine answers, with the NVIDIA runtime when GPUs are requested.

Also the Docker facts other checks ask for (image, containers, the data root's free disk): each
is a `Task` after "docker", so an unreachable engine is one error, not four."""

from __future__ import annotations

from collections.abc import Mapping

from sparkctl.facts.disk import probe_df
from sparkctl.facts.docker import DockerFacts, nvidia_hook_probe, probe_containers, probe_docker, probe_image
from sparkctl.facts.probe import Probe
from sparkctl.findings import Finding
from sparkctl.preflight.base import ERROR, OK, Check, Ctx, NodeFacts, Task


def docker_tasks(
    ctx: Ctx, *, image: bool = False, containers: bool = False, df: bool = False
) -> dict[str, Task]:
    out = {"docker": Task(lambda conn, _: probe_docker(conn))}
    if image:
        from sparkctl.profile.derived import image_ref

        ref = image_ref(ctx.profile)[0]
        out["image"] = Task(lambda conn, _: probe_image(conn, ref), after="docker")
    if containers:
        out["containers"] = Task(lambda conn, _: probe_containers(conn), after="docker")
    if df:  # the engine's data root is known only once "docker" answered
        out["df:image"] = Task(lambda conn, got: probe_df(conn, got["docker"].root_dir), after="docker")
    return out


class DockerEngine(Check):
    name = "DockerEngine"
    summary = "the node's Docker engine answers (and has the NVIDIA runtime when GPUs are requested)"
    order = 70
    fast = True
    router_node = True  # the router runs in a container too (without GPUs)

    def probes(self, ctx: Ctx, node: str) -> dict[str, Probe | Task]:
        out: dict[str, Probe | Task] = {**docker_tasks(ctx)}
        if ctx.gpus_requested and node != ctx.router_only:
            out["hook"] = nvidia_hook_probe()
        return out

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        out: list[Finding] = []
        for node, f in facts.items():
            if not ctx.failed(out, "docker", self.name, f) and f.get("docker") is not None:
                gpus = ctx.gpus_requested and node != ctx.router_only
                out += check_docker(node, f.get("docker"), gpus, f.get("hook"))
        return out


def check_docker(
    node: str, facts: DockerFacts, gpus_requested: bool, hook_present: bool | None
) -> list[Finding]:
    out = [
        Finding(
            "DockerEngine",
            OK,
            f"Docker {facts.version} ({facts.root_dir})",
            node=node,
            data={"version": facts.version, "runtimes": list(facts.runtimes)},
        )
    ]
    if gpus_requested:
        if "nvidia" in facts.runtimes or facts.default_runtime == "nvidia" or hook_present:
            out.append(Finding("DockerEngine", OK, "NVIDIA container runtime present", node=node))
        else:
            out.append(
                Finding(
                    "DockerEngine",
                    ERROR,
                    f"no NVIDIA runtime in Docker on {node} (runtimes: "
                    f"{', '.join(facts.runtimes) or 'none'}); containers cannot get GPUs",
                    "install nvidia-container-toolkit, then `sudo nvidia-ctk runtime configure "
                    "--runtime=docker && sudo systemctl restart docker`",
                    node=node,
                )
            )
    return out
