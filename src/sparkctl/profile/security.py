"""Profile pieces that decide what a container and the API may do (docs/security.md).

Least privilege by default: no `--privileged`, RDMA devices only for the modes that use RoCE
(the `rdma` preset), a private IPC namespace sized by `shm_size`, an API key before the API
listens on every interface, and SSH words that can never be read as options.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from sparkctl.profile.base import Strict

# What NCCL over RoCE needs in a container (and nothing more): the verbs/rdma_cm device nodes,
# IPC_LOCK to pin (register) memory for RDMA, and no memlock limit on that pinning.
RDMA_DEVICES_DIR = "/dev/infiniband"
RDMA_CAPS = ("IPC_LOCK",)
RDMA_ULIMITS: dict[str, int] = {"memlock": -1}
DEFAULT_SHM = "32g"
# Processes + threads of one rank's container: an engine's rank runs a few processes with up to a few
# hundred threads each (torch intra-op pools, NCCL, triton's compile workers); a fork bomb stops here.
DEFAULT_PIDS = 8192

# No leading '-' (ssh/ssh-copy-id would read it as an option), no whitespace or control characters.
_SSH_WORD_RE = re.compile(r"^[^-\s\x00-\x1f\x7f][^\s\x00-\x1f\x7f]*$")


def ssh_word(value: str | None, what: str) -> str | None:
    """Validate a user name or address that ends up as an SSH destination."""
    if value is None:
        return None
    if not _SSH_WORD_RE.fullmatch(value):
        raise ValueError(
            f"{what} {value!r} is not a valid SSH {what}: it must not start with '-' "
            f"or contain spaces or control characters"
        )
    return value


_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
# Hugging Face's repo-id grammar (huggingface_hub `validate_repo_id`), ASCII only: `org/name` or
# `name`, parts of [A-Za-z0-9._-] up to 96 characters, no `--` or `..`, not ending in `.git`.
_MODEL_ID_RE = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?/)?[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?$"
)
# A commit, branch or tag as the HF cache stores it under refs/ (the node program's own rule).
_REVISION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")


def node_dir(value: str | None, what: str) -> str | None:
    """A directory on the nodes (hf_cache, triton_cache): absolute or `~/...`, no `..` part and no
    control character. Quotes, spaces, `$`, `;` stay allowed: no shell ever parses a path (the
    controller's and the node-to-node hop's commands are encoded, docs/security.md)."""
    if value is None:
        return None
    if not (value == "~" or value.startswith(("~/", "/"))):
        raise ValueError(f"{what} {value!r} must be an absolute path or start with ~/")
    if _CONTROL_RE.search(value) or ".." in value.split("/"):
        raise ValueError(f"{what} {value!r} must not contain a '..' part or control characters")
    return value


def model_id(value: str) -> str:
    if not _MODEL_ID_RE.fullmatch(value) or "--" in value or ".." in value or value.endswith(".git"):
        raise ValueError(
            f"id {value!r} is not a Hugging Face repo id (org/name: letters, digits, '.', '_', '-'; "
            "no '--' or '..')"
        )
    return value


def revision(value: str | None) -> str | None:
    if value is None:
        return None
    if not _REVISION_RE.fullmatch(value) or ".." in value.split("/") or value.endswith(".sparkctl-part"):
        raise ValueError(
            f"revision {value!r} is not a commit, branch or tag name (letters, digits, '.', '_', '/', '-')"
        )
    return value


# Docker's image reference grammar (distribution/reference): [domain[:port]/]path[:tag][@digest],
# path components lowercase alphanumerics joined by `.`, `_`, `__` or dashes.
_DOMAIN = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REF_RE = re.compile(
    rf"^(?:(?:{_DOMAIN}|\[[0-9a-fA-F:]+\])(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)


def image_ref(value: str) -> str:
    """An image reference as Docker parses it; never an option (`-...`) or anything else."""
    if len(value) > 255 or not _IMAGE_REF_RE.fullmatch(value):
        raise ValueError(f"image.ref {value!r} is not a Docker image reference (name[:tag][@digest])")
    return value


# Annotated types for the profile's fields (the field name is in pydantic's error location).
NodeDir = Annotated[str, AfterValidator(lambda v: node_dir(v, "path") or v)]
ModelId = Annotated[str, AfterValidator(model_id)]
Revision = Annotated[str, AfterValidator(revision)]
ImageRef = Annotated[str, AfterValidator(image_ref)]

Unlimited = Literal["unlimited"]


class ContainerOptions(Strict):
    preset: Literal["auto", "rdma", "none"] = Field(
        "auto",
        description="rdma: the node's /dev/infiniband/* devices, cap IPC_LOCK, memlock unlimited, for the "
        "multi-node modes over RoCE (solo modes never get them); auto = rdma when fabric.transport is roce.",
    )
    ipc: Literal["auto", "private", "host"] = Field(
        "auto",
        description="private: own IPC namespace with shm_size of /dev/shm (one container per node holds all "
        "its GPUs, so NCCL's shared memory stays inside it); host: the node's IPC namespace (shm_size "
        "does not apply); auto = host only when two ranks of a mode share one machine.",
    )
    shm_size: Annotated[str | None, Field(pattern=r"^\d+[bkmg]?$")] = Field(
        None, description=f"/dev/shm size in a private IPC namespace (default {DEFAULT_SHM})."
    )
    devices: list[str] = Field(
        default_factory=list, description="Extra device nodes, 'host[:container[:rwm]]'."
    )
    cap_add: list[Annotated[str, Field(pattern=r"^[A-Z_]+$")]] = Field(
        default_factory=list, description="Extra Linux capabilities, e.g. SYS_NICE."
    )
    ulimits: dict[str, int | Unlimited] = Field(
        default_factory=dict, description="Extra ulimits (soft = hard), e.g. {nofile: 65536}."
    )
    rdma_devices_dir: str = Field(
        RDMA_DEVICES_DIR, description="Where the preset finds the RDMA device nodes on each node."
    )
    pids_limit: int = Field(
        DEFAULT_PIDS, ge=256, description="Processes and threads a rank's container may hold (--pids-limit)."
    )
    privileged: bool = Field(
        False, description="Opt-in --privileged (all devices, all capabilities); plan and preflight warn."
    )
    gpus: bool = Field(
        True, description="Request the node's GPUs via the NVIDIA runtime (false on CPU-only rigs)."
    )

    @model_validator(mode="after")
    def _truthful(self) -> ContainerOptions:
        if self.ipc == "host" and self.shm_size is not None:
            raise ValueError(
                "shm_size: Docker ignores shm_size under ipc: host; remove shm_size or use ipc: private"
            )
        return self
