"""Docker facts through the node's Docker API: the engine, an image, the containers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkctl.facts.probe import Probe, ProbeError, sh_argv

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector

NVIDIA_HOOK_SCRIPT = "command -v nvidia-container-runtime-hook || command -v nvidia-ctk"


def nvidia_hook_probe() -> Probe:
    return Probe(tuple(sh_argv(NVIDIA_HOOK_SCRIPT)), lambda r: r.ok)


@dataclass(frozen=True)
class DockerFacts:
    version: str
    runtimes: tuple[str, ...]
    default_runtime: str
    root_dir: str
    cdi_spec_dirs: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImageFacts:
    ref: str
    id: str
    size: int
    layers: tuple[str, ...] = ()
    created: str = ""
    repo_digests: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] = ()  # the image's own ENTRYPOINT and CMD (a rank replaces both)
    cmd: tuple[str, ...] = ()


@dataclass(frozen=True)
class ContainerFacts:
    id: str
    name: str
    state: str  # running, exited, created...
    image: str
    labels: dict[str, str] = field(default_factory=dict)


def docker_facts_from_info(info: dict) -> DockerFacts:
    return DockerFacts(
        version=str(info.get("ServerVersion", "?")),
        runtimes=tuple(sorted((info.get("Runtimes") or {}).keys())),
        default_runtime=str(info.get("DefaultRuntime", "")),
        root_dir=str(info.get("DockerRootDir", "/var/lib/docker")),
        cdi_spec_dirs=tuple(info.get("CDISpecDirs") or ()),
    )


def image_facts_from_inspect(ref: str, attrs: dict) -> ImageFacts:
    return ImageFacts(
        ref=ref,
        id=str(attrs["Id"]),
        size=int(attrs.get("Size") or 0),
        layers=tuple((attrs.get("RootFS") or {}).get("Layers") or ()),
        created=str(attrs.get("Created", "")),
        repo_digests=tuple(attrs.get("RepoDigests") or ()),
        entrypoint=tuple((attrs.get("Config") or {}).get("Entrypoint") or ()),
        cmd=tuple((attrs.get("Config") or {}).get("Cmd") or ()),
    )


def containers_from_list(items: list[dict]) -> list[ContainerFacts]:
    return [
        ContainerFacts(
            id=str(c.get("Id", ""))[:12],
            name=(c.get("Names") or ["/?"])[0].lstrip("/"),
            state=str(c.get("State", "")),
            image=str(c.get("Image", "")),
            labels=dict(c.get("Labels") or {}),
        )
        for c in items
    ]


def probe_docker(conn: Connector) -> DockerFacts:
    try:
        return docker_facts_from_info(conn.docker().info())
    except ProbeError:
        raise
    except Exception as exc:  # noqa: BLE001 - ConnectError or docker errors: no usable engine
        raise ProbeError(  # the connector's own fix names the cause (stopped: `systemctl start docker`)
            f"Docker engine not reachable: {getattr(exc, 'message', None) or exc}",
            getattr(exc, "fix", None)
            or "install Docker, add the SSH user to the docker group, and check `docker info` on the node",
        ) from None


def probe_image(conn: Connector, ref: str) -> ImageFacts | None:
    """The image as the node's engine has it; None when absent."""
    import docker.errors

    try:
        return image_facts_from_inspect(ref, conn.docker().api.inspect_image(ref))
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        if exc.status_code == 404:
            return None
        raise ProbeError(f"inspecting image {ref}: {exc.explanation or exc}") from None


def probe_containers(conn: Connector) -> list[ContainerFacts]:
    return containers_from_list(conn.docker().api.containers(all=True))
