"""RankSpec -> a container on the rank's node, through the Docker engine API (docker SDK).

The plan's argv, env, mounts, options and labels go into the create request unchanged; secret
values are revealed only here, into the API request body (never a command line or a log).
Containers are found again by label (`sparkctl.cluster=<name>`), so reconcile, `status` and
`down` never depend on names alone.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sparkctl.errors import SparkctlError
from sparkctl.planning.build import LABEL_PREFIX, RankSpec
from sparkctl.runtime.node_user import node_uid_gid
from sparkctl.runtime.removal import STOP_GRACE, remove  # noqa: F401  (callers' one import)
from sparkctl.runtime.secret_files import place_secrets
from sparkctl.secrets import reveal

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector
from sparkctl.connectors.pool import NodePool

CLUSTER_LABEL = f"{LABEL_PREFIX}cluster"


@dataclass(frozen=True)
class ContainerInfo:
    """What sparkctl needs to know about one of its containers (parsed from `inspect`)."""

    node: str
    name: str
    id: str
    status: str  # created, running, restarting, exited, dead, ...
    exit_code: int | None
    oom_killed: bool
    started_at: datetime | None
    finished_at: datetime | None
    image: str
    image_id: str
    labels: dict[str, str]

    @property
    def running(self) -> bool:
        return self.status == "running"

    @property
    def cluster(self) -> str | None:
        return self.labels.get(CLUSTER_LABEL)

    @property
    def mode(self) -> str | None:
        return self.labels.get(f"{LABEL_PREFIX}mode")

    @property
    def rank(self) -> int | None:
        value = self.labels.get(f"{LABEL_PREFIX}rank")
        return int(value) if value and value.isdigit() else None

    @property
    def role(self) -> str:
        """ "router" for sglang-router's container, "gateway" for a gateway, else "engine" (a rank)."""
        return self.labels.get(f"{LABEL_PREFIX}role", "engine")

    @property
    def group(self) -> int | None:
        value = self.labels.get(f"{LABEL_PREFIX}group")
        return int(value) if value and value.isdigit() else None

    @property
    def config_hash(self) -> str | None:
        return self.labels.get(f"{LABEL_PREFIX}config_hash")

    def uptime_s(self, now: datetime | None = None) -> float | None:
        if not self.running or self.started_at is None:
            return None
        return ((now or datetime.now(UTC)) - self.started_at).total_seconds()

    def describe_exit(self) -> str:
        text = f"exit code {self.exit_code}" if self.exit_code is not None else self.status
        return text + (" (killed: out of memory)" if self.oom_killed else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "name": self.name,
            "id": self.id[:12],
            "status": self.status,
            "exit_code": self.exit_code,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "uptime_s": self.uptime_s(),
            "image": self.image,
            "image_id": self.image_id,
            "mode": self.mode,
            "rank": self.rank,
            "replica": self.group if self.role == "engine" else None,
            "role": self.role,
            "config_hash": self.config_hash,
        }


def parse_docker_time(value: str | None) -> datetime | None:
    """Docker's RFC 3339 nano timestamps; the zero time ("0001-01-01...") means never."""
    if not value or value.startswith("0001-"):
        return None
    head, _, frac = value.rstrip("Z").partition(".")
    tz = ""
    for sign in ("+", "-"):
        if sign in frac:
            frac, _, off = frac.partition(sign)
            tz = sign + off
    if not tz and not value.endswith("Z") and len(head) > 19:
        head, tz = head[:19], head[19:]
    micro = (frac + "000000")[:6] if frac else "000000"
    parsed = datetime.fromisoformat(f"{head}.{micro}{tz or '+00:00'}")
    return parsed.astimezone(UTC)


def info_from_attrs(node: str, attrs: dict[str, Any]) -> ContainerInfo:
    state = attrs.get("State") or {}
    config = attrs.get("Config") or {}
    status = state.get("Status") or "unknown"
    return ContainerInfo(
        node=node,
        name=(attrs.get("Name") or "").lstrip("/"),
        id=attrs.get("Id") or "",
        status=status,
        exit_code=state.get("ExitCode") if status in ("exited", "dead") else None,
        oom_killed=bool(state.get("OOMKilled")),
        started_at=parse_docker_time(state.get("StartedAt")),
        finished_at=parse_docker_time(state.get("FinishedAt")),
        image=config.get("Image") or "",
        image_id=attrs.get("Image") or "",
        labels=dict(config.get("Labels") or {}),
    )


def create_params(
    spec: RankSpec, env: dict[str, str], rdma_devices: list[str] | None = None
) -> dict[str, Any]:
    """Keyword arguments of `containers.create` for a rank (env given already revealed).

    The argv replaces the image's ENTRYPOINT and CMD (`launch_params`): the plan's argv runs
    whatever the image's shape (the launcher as ENTRYPOINT, an entrypoint script, none).
    `rdma_devices`: the device nodes the rdma preset found on the node (`node_rdma_devices`).
    `init`: Docker's init is PID 1 and forwards signals, so an engine that installs no SIGTERM
    handler still stops on SIGTERM (a PID 1 ignores it).
    """
    from docker.types import DeviceRequest, Mount, Ulimit

    opts = spec.options
    devices = [f"{d}:{d}:rwm" for d in rdma_devices or []] + list(opts.devices)
    params: dict[str, Any] = {
        "image": spec.image,
        **launch_params(spec.argv),
        "name": spec.container_name,
        "environment": dict(env),
        "labels": dict(spec.labels),
        "network_mode": opts.network_mode,
        "ipc_mode": opts.ipc_mode,
        "privileged": opts.privileged,
        "devices": devices,
        "cap_add": list(opts.cap_add),
        "cap_drop": list(opts.cap_drop),
        "security_opt": list(opts.security_opt),
        "ulimits": [Ulimit(name=k, soft=v, hard=v) for k, v in opts.ulimits.items()],
        "mounts": [
            Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only) for m in spec.mounts
        ],
        "detach": True,
        "init": True,
    }
    if opts.pids_limit:
        params["pids_limit"] = opts.pids_limit
    if opts.read_only:
        params["read_only"] = True
    if opts.shm_size and opts.ipc_mode != "host":  # Docker ignores it under --ipc host
        params["shm_size"] = opts.shm_size
    if opts.gpus == "all":
        params["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    elif opts.gpus:
        params["device_requests"] = [DeviceRequest(device_ids=opts.gpus.split(","), capabilities=[["gpu"]])]
    return params


def launch_params(argv: list[str]) -> dict[str, list[str]]:
    """`entrypoint` + `command` that run exactly `argv` (a set entrypoint drops the image's CMD)."""
    return {"entrypoint": list(argv[:1]), "command": list(argv[1:])}


def revealed_env(spec: RankSpec) -> dict[str, str]:
    return {k: reveal(v) for k, v in spec.env.items()}


def node_rdma_devices(conn: Connector, spec: RankSpec) -> list[str]:
    """The character devices in the preset's directory on the node (/dev/infiniband/uverbs0, rdma_cm...)."""
    where = spec.options.rdma_devices_dir
    if not where:
        return []
    script = 'for d in "$1"/*; do [ -c "$d" ] && printf "%s\\n" "$d"; done; exit 0'
    res = conn.run(["sh", "-c", script, "sparkctl-rdma", where])
    found = sorted(line for line in res.stdout.splitlines() if line.startswith("/"))
    if res.rc or not found:
        raise SparkctlError(
            f"no RDMA device nodes in {where} (the rdma preset needs them for NCCL over RoCE)",
            fix="load the RDMA drivers (mlx5_ib, rdma_ucm) on the node, or set fabric.transport: tcp "
            "or engine.container.preset: none",
            node=spec.node,
            rank=rank_of(spec),
        )
    return found


def list_cluster(conn: Connector, cluster: str) -> list[ContainerInfo]:
    """Every container of this cluster on the node (any state), found by label."""
    client = conn.docker()
    found = client.containers.list(all=True, filters={"label": f"{CLUSTER_LABEL}={cluster}"})
    return [info_from_attrs(conn.node, c.attrs) for c in found]


def list_nodes(
    pool: NodePool, cluster: str, nodes: list[str]
) -> tuple[list[ContainerInfo], dict[str, BaseException]]:
    """This cluster's containers on every given node, in parallel; and {node: why} for the nodes
    that could not be asked (callers decide: `up` stops, `down` cleans the rest, `status` reports)."""
    results = pool.map(nodes, lambda conn: list_cluster(conn, cluster))
    return [c for infos in results.ok.values() for c in infos], results.errors


def inspect(conn: Connector, name: str) -> ContainerInfo | None:
    import docker.errors

    try:
        return info_from_attrs(conn.node, conn.docker().api.inspect_container(name))
    except docker.errors.NotFound:
        return None


def prepare_node(conn: Connector, specs: list[RankSpec], extra_dirs: list[str]) -> None:
    """Create the rank's writable bind-mount sources (caches) and the log dir on the node.

    Read-only mounts (secret files) are not created: a missing one must fail loudly at create.
    """
    dirs = sorted({m.source for s in specs for m in s.mounts if not m.read_only} | set(extra_dirs))
    if dirs:
        conn.run(["mkdir", "-p", "--", *dirs]).check("creating cache and log directories")
    if extra_dirs:  # the log directory: rank logs may hold what an engine prints
        conn.run(["chmod", "700", "--", *extra_dirs]).check("restricting the log directory to its owner")


def start_rank(conn: Connector, spec: RankSpec, secret_files: bytes | None) -> ContainerInfo:
    """Create and start the rank's container with its secrets' tar (`secret_files.seal`, read
    before); expected Docker failures become SparkctlErrors."""
    import docker.errors

    client = conn.docker()
    devices = node_rdma_devices(conn, spec)
    params = create_params(spec, revealed_env(spec), devices)
    owner = ""  # the secret files stay the node user's unless the engine runs as another uid
    if spec.options.user != "root":  # the engine as the node user (or the profile's UID:GID)
        params["user"] = node_uid_gid(conn) if spec.options.user == "node" else spec.options.user
        owner = "" if spec.options.user == "node" else spec.options.user
    if secret_files:  # on the node's tmpfs, mounted read-only: never a disk, argv, env or inspect
        params["mounts"] = [*params["mounts"], *place_secrets(conn, spec, secret_files, owner)]
    try:
        container = client.containers.create(**params)
    except docker.errors.ImageNotFound:
        raise SparkctlError(
            f"image {spec.image} is not on node {spec.node}",
            fix=(
                "build the gateway image on the node (docs/security.md, images/gateway) or set engine.gateway: false"
                if spec.role == "gateway"
                else "copy it there first: `sparkctl ship` (or docker pull on the node)"
            ),
            node=spec.node,
            rank=rank_of(spec),
        ) from None
    except docker.errors.APIError as exc:
        raise _api_error("creating container " + spec.container_name, exc, spec) from None
    try:
        container.start()
    except docker.errors.APIError as exc:
        with contextlib.suppress(docker.errors.APIError):
            container.remove(force=True)
        raise _api_error("starting container " + spec.container_name, exc, spec) from None
    container.reload()
    return info_from_attrs(conn.node, container.attrs)


def engine_uid(conn: Connector, spec: RankSpec) -> int | None:
    """The uid `spec`'s started container runs as on the node: the node user's, a UID:GID, or the
    image's own user (read from the container: Docker merges the image's USER into it); None for
    a user the image names without a number (no uid to compare without its passwd file)."""
    import docker.errors

    user = spec.options.user
    if user == "node":
        user = node_uid_gid(conn)
    elif user == "root":
        try:
            user = conn.docker().api.inspect_container(spec.container_name)["Config"].get("User") or "0"
        except docker.errors.NotFound:
            return None
    head = user.split(":")[0]
    return 0 if head == "root" else int(head) if head.isdigit() else None


def _api_error(what: str, exc: Exception, spec: RankSpec) -> SparkctlError:
    text = str(getattr(exc, "explanation", None) or exc)
    fix = None
    if "capabilities: [[gpu]]" in text or "nvidia" in text.lower():
        fix = "install the NVIDIA container toolkit on the node (`nvidia-ctk runtime configure --runtime=docker`)"
    elif "bind source path does not exist" in text:
        fix = "create the file on the node (secret files must exist on every node) or fix the profile path"
    elif "Conflict" in text or "already in use" in text:
        fix = "run `sparkctl down` (or remove the container by hand) and retry"
    return SparkctlError(f"{what} failed: {text}", fix=fix, node=spec.node, rank=rank_of(spec))


def rank_of(spec: RankSpec) -> int | None:
    """The rank an error names: none for the router's container or its gateway (their messages
    name them); a rank's gateway names its rank."""
    return spec.rank if spec.rank >= 0 else None


def tail_logs(conn: Connector, name: str, lines: int = 40) -> list[str]:
    """The container's last log lines from the engine (stdout+stderr), [] if it is gone."""
    import docker.errors

    try:
        raw = conn.docker().api.logs(name, stdout=True, stderr=True, tail=lines)
    except docker.errors.NotFound:
        return []
    return raw.decode(errors="replace").splitlines()
