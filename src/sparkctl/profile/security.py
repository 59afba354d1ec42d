"""Profile pieces that decide what a container and the API may do (docs/security.md).

Least privilege by default: no `--privileged`, RDMA devices only for the modes that use RoCE
(the `rdma` preset), a private IPC namespace sized by `shm_size`, an API key before the API
listens on every interface, and SSH words that can never be read as options.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, model_validator

from sparkctl.profile.base import Strict

# What NCCL over RoCE needs in a container (and nothing more): the verbs/rdma_cm device nodes,
# IPC_LOCK to pin (register) memory for RDMA, and no memlock limit on that pinning.
RDMA_DEVICES_DIR = "/dev/infiniband"
RDMA_CAPS = ("IPC_LOCK",)
RDMA_ULIMITS: dict[str, int] = {"memlock": -1}
DEFAULT_SHM = "32g"
ALL_INTERFACES = ("0.0.0.0", "::", "[::]", "")

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
