"""The security half of planning (pure, no I/O): container privileges, secret delivery, API binding.

`plan.py` calls these; docs/security.md explains every default. Nothing here reads a secret value.
"""

from __future__ import annotations

import ipaddress
import posixpath
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkctl.errors import ProfileError
from sparkctl.profile.security import DEFAULT_PIDS, DEFAULT_SHM, RDMA_CAPS, RDMA_ULIMITS
from sparkctl.secrets import SecretFile, SecretRef

if TYPE_CHECKING:
    from sparkctl.engines.capabilities import Auth
    from sparkctl.profile.schema import Mode, Node, Profile

SECRETS_DIR = "/run/secrets"


@dataclass(frozen=True)
class Mount:
    source: str  # path on the node
    target: str  # path in the container
    read_only: bool = False


@dataclass(frozen=True)
class RunOptions:
    """`docker run` options of one rank: the profile's engine.container resolved (GPU ids, rdma preset)."""

    network_mode: str = "host"
    ipc_mode: str = "private"  # "private" (own /dev/shm of shm_size) or "host"
    shm_size: str | None = DEFAULT_SHM  # None under ipc host, where Docker ignores it
    privileged: bool = False
    gpus: str | None = "all"  # "all", "0,1" (device ids) or None for no GPU request
    rdma_devices_dir: str | None = None  # the rdma preset: every device node found there at start
    devices: list[str] = field(default_factory=list)
    cap_add: list[str] = field(default_factory=list)
    ulimits: dict[str, int] = field(default_factory=dict)  # soft = hard; -1 = unlimited
    # Every capability dropped, then only cap_add (the preset's, DAC_OVERRIDE for another node
    # user's caches, the profile's); no setuid gain; a bounded process table.
    cap_drop: list[str] = field(default_factory=lambda: ["ALL"])
    security_opt: list[str] = field(default_factory=lambda: ["no-new-privileges:true"])
    pids_limit: int | None = DEFAULT_PIDS
    user: str = "root"  # "root" (the image's), "node" (the node user's uid:gid, read at start), "UID:GID"
    read_only: bool = False  # a read-only root filesystem (the gateway's)

    def describe(self) -> str:
        """One line for `plan`."""
        parts = [f"{self.network_mode} net", f"{self.ipc_mode} ipc"]
        if self.shm_size:
            parts.append(f"shm {self.shm_size}")
        parts.append(f"gpus {self.gpus or 'none'}")
        if self.rdma_devices_dir:
            parts.append(f"rdma devices {self.rdma_devices_dir}/*")
        parts += [f"device {d}" for d in self.devices]
        parts.append("cap_drop " + ",".join(self.cap_drop))
        if self.cap_add:
            parts.append("cap_add " + ",".join(self.cap_add))
        parts += [o.replace(":true", "") for o in self.security_opt]
        if self.pids_limit:
            parts.append(f"pids {self.pids_limit}")
        if self.user != "root":
            parts.append(f"user {self.user}")
        parts += [f"ulimit {k}={'unlimited' if v < 0 else v}" for k, v in self.ulimits.items()]
        if self.privileged:
            parts.append("PRIVILEGED")
        return ", ".join(parts)


def uses_rdma(profile: Profile, mode: Mode) -> bool:
    """The rdma preset applies to replicas spanning nodes over RoCE; single-node replicas never
    get RDMA devices."""
    preset = profile.engine.container.preset
    if preset == "none" or mode.nodes_per_replica < 2:
        return False
    return preset == "rdma" or profile.fabric.transport == "roce"


def _shared_machine(profile: Profile, mode: Mode) -> bool:
    addrs = [profile.node(n).address for n in mode.nodes]
    return len(set(addrs)) < len(addrs)


def container_options(
    profile: Profile, mode: Mode, gpus: str | None, node_user: str = "root", engine_user: str = "root"
) -> RunOptions:
    """`node_user`: who owns the caches the rank mounts read-write; `engine_user`: the engine's
    default for engine.container.user. An engine running as root in the container (the images keep
    HOME and the mount targets under /root) has every capability dropped, and root writes only what
    root owns, so a node user other than root adds DAC_OVERRIDE (the triton cache, the HF cache
    when not offline, 0400 `file:` secrets). An engine running as the node user needs none."""
    opts = profile.engine.container
    ipc = opts.ipc
    if ipc == "auto":
        # One container per node holds all of that node's GPUs, so NCCL's shared memory stays in
        # its own IPC namespace; only ranks sharing one machine need the host's.
        ipc = "host" if _shared_machine(profile, mode) else "private"
    rdma = uses_rdma(profile, mode)
    ulimits = {k: (-1 if v == "unlimited" else int(v)) for k, v in opts.ulimits.items()}
    caps = list(opts.cap_add)
    user = opts.user or engine_user
    if user == "root" and node_user != "root" and "DAC_OVERRIDE" not in caps:
        caps.insert(0, "DAC_OVERRIDE")
    if rdma:
        ulimits = {**RDMA_ULIMITS, **ulimits}
        caps = [*RDMA_CAPS, *(c for c in caps if c not in RDMA_CAPS)]
    return RunOptions(
        ipc_mode=ipc,
        shm_size=None if ipc == "host" else (opts.shm_size or DEFAULT_SHM),
        privileged=opts.privileged,
        gpus=gpus,
        rdma_devices_dir=opts.rdma_devices_dir if rdma else None,
        devices=list(opts.devices),
        cap_add=caps,
        ulimits=ulimits,
        pids_limit=opts.pids_limit,
        user=user,
    )


ROOT_HOME = {"HF_HOME": "/root/.cache/huggingface", "TRITON_CACHE_DIR": "/root/.triton"}
# Not under /root (0700 in the images: another uid cannot even pass through it to a mount there);
# HOME in the container's /tmp (1777), USER for getpass (the uid has no passwd entry).
USER_HOME = {
    "HF_HOME": "/var/cache/sparkctl/huggingface",
    "TRITON_CACHE_DIR": "/var/cache/sparkctl/triton",
    "HOME": "/tmp/sparkctl-home",
    "USER": "sparkctl",
}


def container_home(user: str) -> dict[str, str]:
    """Where the engine's caches are mounted and its HOME is, for the user it runs as."""
    return dict(ROOT_HOME if user == "root" else USER_HOME)


def secret_delivery(
    profile: Profile, node: Node, node_path: Callable[[str, Node, Profile], str], auth: Auth | None
) -> tuple[dict[str, str], list[Mount], list[SecretFile]]:
    """env (paths only), read-only mounts and secret files of a rank.

    Every secret reaches the container as a file and `<NAME>_PATH` (HF_TOKEN -> HF_TOKEN_PATH,
    which huggingface_hub reads): `docker inspect` and /proc/<pid>/environ never show a value.
    The API keys go in the engine's key file (its Auth: `key: "..."` YAML lines, or the key alone).
    """
    env: dict[str, str] = {}
    mounts: list[Mount] = []
    files: list[SecretFile] = []
    for name, secret in profile.engine.secrets.items():
        target = f"{SECRETS_DIR}/{name}"
        env[f"{name}_PATH"] = target
        if secret.env:
            files.append(SecretFile(target, SecretRef(name=name, env=secret.env)))
        else:
            source = node_path(secret.file or "", node, profile)
            mounts.append(Mount(source, target, read_only=True))
            files.append(SecretFile(target, SecretRef(name=name, file=source, node=node.name), bind=True))
    for key, secret in (("api-key", profile.engine.api_key), ("admin-api-key", profile.engine.admin_api_key)):
        if secret is not None and auth is not None:  # an engine without auth: refused by planning
            ref = secret_ref(key, secret, node, profile, node_path)
            files.append(SecretFile(auth.key_file, ref, auth.yaml_key(key)))
    return env, mounts, files


def secret_ref(
    name: str, secret: object, node: Node, profile: Profile, node_path: Callable[[str, Node, Profile], str]
) -> SecretRef:
    env = getattr(secret, "env", None)
    if env:
        return SecretRef(name=name, env=env)
    return SecretRef(
        name=name, file=node_path(getattr(secret, "file", "") or "", node, profile), node=node.name
    )


def all_interfaces(host: str | None) -> bool:
    """`0.0.0.0`, `::`, `0`, `::0`, `0:0:0:0:0:0:0:0`, `[::]`, `0x0`, ``: every form a socket bind
    (getaddrinfo, inet_aton's short forms) reads as the unspecified address."""
    if host is None:
        return False
    h = host.strip().strip("[]")
    if h == "" or h == "*":
        return True
    addr = _address(h)
    return addr is not None and addr.is_unspecified


def loopback(host: str) -> bool:
    h = host.strip().strip("[]")
    addr = _address(h)
    return h.lower() == "localhost" or (addr is not None and addr.is_loopback)


def _address(h: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(h.split("%", 1)[0])
    except ValueError:
        pass
    try:  # inet_aton's forms: "0", "127.1", "0x7f.1", "017700000001"
        return ipaddress.IPv4Address(socket.inet_aton(h))
    except OSError:
        return None


def keyless_binds(profile: Profile) -> list[str]:
    """The non-loopback addresses an API without a key would listen on: the engine.host (rank 0
    and, for every interface, all ranks), each remote node's own address (the default host, the
    other ranks of a multi-node replica, the replicas behind a router)."""
    if profile.engine.api_key is not None:
        return []
    out: list[str] = []
    host = profile.engine.host
    if host is not None and not loopback(host):
        out.append(host or "(empty)")
    out += [n.address for n in profile.nodes if not n.is_local and n.address not in out]
    return out


def bind_host(profile: Profile, node: Node, rank: int, ip: str | None = None) -> str:
    """--host of a rank: the profile's choice (rank 0 serves the API; a specific address of rank 0
    cannot be bound on the other nodes), else the node's IP (`ip`: resolved on the node when the
    profile addresses it by name; never a name the container may not resolve)."""
    host = profile.engine.host
    if host is not None and (rank == 0 or all_interfaces(host)):
        return host
    return "127.0.0.1" if node.is_local else ip or node.address


LOOPBACK = "127.0.0.1"


def needs_node_ip(profile: Profile, node: Node, rank: int) -> bool:
    """Whether bind_host falls back to the node's own address."""
    host = profile.engine.host
    return not node.is_local and not (host is not None and (rank == 0 or all_interfaces(host)))


def is_ip(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    return True


def endpoint_host(profile: Profile, rank0: Node) -> str:
    host = profile.engine.host
    if host is not None and not all_interfaces(host):
        return host.strip("[]")
    return "127.0.0.1" if rank0.is_local else rank0.address


def binds_everywhere(profile: Profile) -> bool:
    return all_interfaces(profile.engine.host)


def broad_rdma_dir(profile: Profile) -> str | None:
    """rdma_devices_dir when it is wider than an RDMA device directory (/, /dev, /dev/<other>)."""
    where = posixpath.normpath(profile.engine.container.rdma_devices_dir or "/dev/infiniband")
    if where in ("/", "/dev") or (where.startswith("/dev/") and not where.startswith("/dev/infiniband")):
        return where
    return None


def plan_warnings(profile: Profile, mode: Mode) -> list[str]:
    """What `plan` (and preflight, as findings) says about the security of this launch."""
    from sparkctl.profile.memory import gb10_without_gpu

    eng = profile.engine
    out: list[str] = []
    for node in gb10_without_gpu(profile, mode.nodes):
        out.append(
            f"nodes.{node} looks like a DGX Spark but has no gpu: section: no 0.90 memory-fraction cap, "
            "no admission, settle or guard; add gpu: {name: NVIDIA GB10, memory_gib: 128, "
            'compute_capability: "12.1", unified_memory: true}'
        )
    if eng.container.privileged:
        out.append(
            "engine.container.privileged: true gives the containers every device and capability; "
            "the rdma preset (devices, IPC_LOCK, memlock) is what NCCL over RoCE needs"
        )
    if binds_everywhere(profile) and eng.api_key is None:
        level = "public on purpose (expose: public)" if eng.expose == "public" else "an ERROR in preflight"
        out.append(f"the API listens on every interface without engine.api_key: {level}")
    if eng.trust_remote_code:
        out.append("engine.trust_remote_code: the model repo's own Python runs in the container")
    if not eng.gateway and eng.api_key is not None:
        admin = "and engine.admin_api_key " if eng.admin_api_key is not None else ""
        out.append(
            f"engine.gateway: false: the engine answers every setting, engine.api_key {admin}included, on "
            "/server_info to anyone who reaches its port with the key: keep the gateway on, or give the keys "
            "only where api_key holders are trusted"
        )
    if uses_rdma(profile, mode) and (where := broad_rdma_dir(profile)) is not None:
        out.append(
            f"engine.container.rdma_devices_dir {where}: every character device in it goes to the containers"
        )
    for what, ref in (("model.target", profile.model.target), ("model.draft", profile.model.draft)):
        if ref is not None and not is_pinned(ref.revision):
            out.append(
                f"{what}.revision is {ref.revision or 'unset (main)'}: pin a commit so every node serves "
                "the bytes you reviewed"
            )
    return out


def is_pinned(revision: str | None) -> bool:
    """A full or abbreviated commit hash (7..40 hex digits), not a branch or tag."""
    return (
        bool(revision)
        and 7 <= len(revision or "") <= 40
        and all(c in "0123456789abcdef" for c in revision or "")
    )


def no_host_code_in(mounts: list[Mount], node: Node, own: str, home: str, index: int) -> None:
    """The container writes its read-write mounts as root: none may hold ~/.cache/sparkctl, where
    the node keeps code the host runs (the compiled node program) and the weights' hash cache, nor
    be the node user's home or a dot-directory of it (~/.local holds the guard's lock and the
    user's Python packages; ~/.config, ~/.ssh ...). A refusal names the key that set the mount
    (nodes[index].triton_cache where the node overrides model.triton_cache)."""
    for m in mounts:
        if not m.read_only and (own == m.source or own.startswith(m.source.rstrip("/") + "/")):
            where = "triton_cache" if m.target.endswith("triton") else "hf_cache"
            raise ProfileError(
                f"{_cache_key(node, where, index)}: {m.source} on node {node.name} would let the serving "
                f"container write {own}",
                fix=f"point {where} at a directory that does not contain ~/.cache/sparkctl "
                "(e.g. ~/.cache/huggingface, ~/.triton)",
            )
        if not m.read_only and _home_dot_dir(m.source, home):
            where = "triton_cache" if m.target.endswith("triton") else "hf_cache"
            raise ProfileError(
                f"{_cache_key(node, where, index)}: {m.source} on node {node.name} would let the serving "
                "container write the "
                f"node user's home or a dot-directory of it ({home}/.local, .config, .ssh...: code and "
                "settings the host runs, the memory guard's lock)",
                fix=f"point {where} at a cache directory (e.g. ~/.cache/huggingface, ~/.triton) or "
                "one outside the home",
            )


# The dot-directories of the home a container may write: caches, where the host keeps no code
# (~/.cache/sparkctl, which holds some, is refused above).
_CACHE_DOT_DIRS = (".cache", ".triton")


def _cache_key(node: Node, where: str, index: int) -> str:
    return f"nodes[{index}].{where}" if getattr(node, where) is not None else f"model.{where}"


def _home_dot_dir(source: str, home: str) -> bool:
    """The home itself, or a dot-directory of it (or anything in one) other than the caches;
    ~/.cache itself is refused too (it holds ~/.cache/sparkctl)."""
    if source == home:
        return True
    if not source.startswith(home.rstrip("/") + "/"):
        return False
    first = source[len(home.rstrip("/")) + 1 :].split("/", 1)[0]
    return first.startswith(".") and first not in _CACHE_DOT_DIRS
