"""Orchestrate the fabric test: one short container per rank, from the plan's image and env.

Each rank runs `fabric_worker.py` (copied into the container with put_archive, so it works the
same over SSH) with the exact NCCL/GLOO environment `sparkctl up` would give that rank, and
rendezvouses at the plan's rank-0 fabric address like the engine's own rendezvous. Containers are
collected when they exit or when the deadline passes (a hang), then removed; the logs become a
FabricReport (fabric_report.py).
"""

from __future__ import annotations

import contextlib
import io
import random
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkctl.errors import SparkctlError, UsageError
from sparkctl.gpu.fabric_report import (
    DEFAULT_THRESHOLD_GBPS,
    FabricReport,
    RankOutput,
    build_report,
    parse_rank_output,
)
from sparkctl.secrets import SecretRef

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector
    from sparkctl.planning.build import Plan, RankSpec

WORKER_SOURCE = Path(__file__).with_name("fabric_worker.py")
WORKER_DIR = "/sparkctl-fabric"
NCCL_SIZES = "1M,16M,128M,1G"
GLOO_SIZES = "64K,1M,8M"
# Environment every rank gets unless the profile sets it: NVLink multicast and cuMem off as the
# engine does, and NCCL's own account of what it chose (the lines a hang diagnosis quotes).
FABRIC_ENV_DEFAULTS = {"NCCL_NVLS_ENABLE": "0", "NCCL_CUMEM_ENABLE": "0", "NCCL_DEBUG": "INFO"}
START_SLACK_S = 45.0  # container start + `import torch` before the worker's own timeout runs
FAILED_PEER_GRACE_S = 10.0


class FabricTestError(SparkctlError):
    """The fabric test could not be run at all (not: it ran and failed, that is a report)."""


@dataclass(frozen=True)
class FabricRank:
    """One worker process: global rank, its node, and the plan's rank it takes env/image from."""

    rank: int
    node: str
    spec: RankSpec
    gpu: int | None  # device id on the node, None for gloo
    container_name: str


def fabric_ranks(plan: Plan, backend: str) -> list[FabricRank]:
    """One worker per GPU of every plan rank (a node with tp 2 on one box gets two)."""
    out: list[FabricRank] = []
    for spec in plan.ranks:
        for local in range(max(1, spec.gpus)):
            rank = len(out)
            out.append(
                FabricRank(
                    rank=rank,
                    node=spec.node,
                    spec=spec,
                    gpu=local if backend == "nccl" else None,
                    container_name=f"sparkctl-{plan.cluster}-fabric-r{rank}",
                )
            )
    return out


def rank_env(spec: RankSpec, backend: str) -> dict[str, str]:
    """The rank's plan env without secrets (the worker needs none) plus the fabric defaults."""
    env = {k: v for k, v in spec.env.items() if not isinstance(v, SecretRef)}
    if env.get("NCCL_IB_HCA", "").startswith("<"):  # unresolved 'auto': only NCCL would care
        if backend == "nccl":
            raise UsageError(
                f"fabric.hcas is 'auto' on node {spec.node} and was not resolved",
                fix="run `sparkctl preflight` (it resolves HCAs from sysfs) or list fabric.hcas in the profile",
                node=spec.node,
            )
        env.pop("NCCL_IB_HCA")
    for key, value in FABRIC_ENV_DEFAULTS.items():
        env.setdefault(key, value)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def worker_argv(
    r: FabricRank, world: int, addr: str, backend: str, sizes: str, iters: int, timeout_s: float
) -> list[str]:
    return [
        "python3",
        f"{WORKER_DIR}/fabric_worker.py",
        "--dist-init-addr",
        addr,
        "--rank",
        str(r.rank),
        "--world-size",
        str(world),
        "--backend",
        backend,
        "--local-device",
        "0",  # the container sees only its own GPU
        "--sizes",
        sizes,
        "--iters",
        str(iters),
        "--warmup",
        str(max(1, iters // 4)),
        "--timeout-s",
        str(timeout_s),
    ]


def _worker_tar() -> bytes:
    buf = io.BytesIO()
    data = WORKER_SOURCE.read_bytes()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        d = tarfile.TarInfo(WORKER_DIR.lstrip("/"))
        d.type, d.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(d)
        info = tarfile.TarInfo(f"{WORKER_DIR.lstrip('/')}/fabric_worker.py")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def free_port(conn: Connector) -> int:
    """A port free on rank 0's node right now (the worker binds it moments later)."""
    res = conn.run(
        ["python3", "-c", "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"],
        timeout=20,
    )
    if res.ok and res.stdout.strip().isdigit():
        return int(res.stdout.strip())
    return random.randint(40000, 49999)


def rendezvous_host(plan: Plan) -> str:
    if plan.dist_init_addr:
        return plan.dist_init_addr.rsplit(":", 1)[0]
    return "127.0.0.1"  # every rank on one node


def _remove_stale(client, name: str) -> None:
    import docker

    with contextlib.suppress(docker.errors.NotFound):
        client.containers.get(name).remove(force=True)


def _start(conn: Connector, r: FabricRank, argv: list[str], env: dict[str, str], backend: str):
    """The rank's serving container, as `up` creates it (same image, env, IPC, shm, rdma preset
    devices/caps/ulimits), but running the worker on one GPU and mounting nothing."""
    import docker

    from sparkctl.runtime.containers import create_params, launch_params, node_rdma_devices

    client = conn.docker()
    _remove_stale(client, r.container_name)
    params = create_params(r.spec, env, node_rdma_devices(conn, r.spec))  # the same rdma preset as `up`
    params.update(
        **launch_params(argv),
        name=r.container_name,
        labels={**r.spec.labels, "sparkctl.mode": "fabric-test", "sparkctl.rank": str(r.rank)},
        mounts=[],
    )
    params.pop("device_requests", None)
    params.pop("detach", None)
    if backend == "nccl":
        params["device_requests"] = [
            docker.types.DeviceRequest(device_ids=[str(r.gpu)], capabilities=[["gpu"]])
        ]
    try:
        container = client.containers.create(**params)
    except docker.errors.ImageNotFound as exc:
        raise FabricTestError(
            f"image {r.spec.image} is not on node {r.node}",
            fix="run `sparkctl ship` first (the fabric test uses the serving image)",
            node=r.node,
            rank=r.rank,
        ) from exc
    container.put_archive("/", _worker_tar())
    container.start()
    return container


def plans_to_test(plan: Plan) -> list[Plan]:
    """One plan per replica that has a fabric inside it (2+ GPUs); replicas never talk to each
    other, so a dp layout of single-GPU replicas has nothing to test."""
    if plan.replicas <= 1:
        return [plan]
    subs = [plan.replica(g.index) for g in plan.groups]
    subs = [s for s in subs if sum(max(1, r.gpus) for r in s.ranks) > 1]
    if not subs:
        raise UsageError(
            f"mode '{plan.mode}' runs single-GPU replicas: there is no fabric between their ranks",
            fix="pick a mode whose replicas span GPUs or nodes (tp >= 2)",
        )
    return subs


def run_fabric_test(
    plan: Plan,
    connectors: dict[str, Connector],
    *,
    backend: str = "nccl",
    sizes: str | None = None,
    iters: int = 20,
    timeout_s: float = 120.0,
    threshold_gbps: float | None = DEFAULT_THRESHOLD_GBPS,
    keep: bool = False,
    poll_s: float = 0.5,
) -> FabricReport:
    """Run one worker per rank, wait for all (or the deadline), and report."""
    if backend not in ("nccl", "gloo"):
        raise UsageError(f"unknown backend {backend!r}", fix="use nccl (GPUs) or gloo (CPU)")
    ranks = fabric_ranks(plan, backend)
    if len(ranks) < 2:
        raise UsageError(
            f"mode '{plan.mode}' has a single rank: there is no fabric to test",
            fix="pick a mode with tp >= 2 (`--mode`)",
        )
    sizes = sizes or (NCCL_SIZES if backend == "nccl" else GLOO_SIZES)
    addr = f"{rendezvous_host(plan)}:{free_port(connectors[ranks[0].node])}"
    containers: dict[int, object] = {}
    outputs: list[RankOutput] = []
    try:
        for r in ranks:
            argv = worker_argv(r, len(ranks), addr, backend, sizes, iters, timeout_s)
            containers[r.rank] = _start(connectors[r.node], r, argv, rank_env(r.spec, backend), backend)
        deadline = time.monotonic() + timeout_s + START_SLACK_S
        exit_codes: dict[int, int] = {}
        while len(exit_codes) < len(ranks) and time.monotonic() < deadline:
            for r in ranks:
                if r.rank in exit_codes:
                    continue
                c = containers[r.rank]
                c.reload()
                if c.status in ("exited", "dead"):
                    exit_codes[r.rank] = int(c.attrs["State"]["ExitCode"])
                    if exit_codes[r.rank] != 0:
                        # The others now wait for a peer that is gone: give them a moment to
                        # report their own view, not their whole timeout.
                        deadline = min(deadline, time.monotonic() + FAILED_PEER_GRACE_S)
            if len(exit_codes) < len(ranks):
                time.sleep(poll_s)
        for r in ranks:
            c = containers[r.rank]
            timed_out = r.rank not in exit_codes
            if timed_out:
                c.kill()
            text = c.logs(stdout=True, stderr=True).decode("utf-8", "replace")
            out = parse_rank_output(text, r.rank, r.node)
            out.exit_code = exit_codes.get(r.rank)
            out.timed_out = timed_out
            outputs.append(out)
    finally:
        if not keep:
            for r in ranks:
                c = containers.get(r.rank)
                if c is not None:
                    # Cleanup is best effort: the report matters more than a leftover container.
                    with contextlib.suppress(Exception):
                        c.remove(force=True)
    return build_report(outputs, backend, threshold_gbps)
