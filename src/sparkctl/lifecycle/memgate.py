"""Before every start on unified-memory nodes (up, switch, a rolling step, a supervised restart):
settle, admit, remember, guard. `start_group` calls `gate` before it creates any container.

1. **Settle**: on a node where this cluster's ranks were stopped since the last start, wait until
   MemAvailable is back within `memory.settle_margin_gib` of what it was before that start (a
   killed engine's pinned and shared memory can stay resident for a while), at most
   `memory.settle_timeout` s, saying how far it is; then admission decides with what is there.
2. **Admit** (admission.py): the budget P (CUDA free memory probed in the image, else
   MemAvailable) against the engine's share, shm and the host reserve; refuse with a fix.
3. **Remember** MemAvailable before this start (the next settle's target), in the controller's
   state (`<cluster>.memory.json` beside the lock).
4. **Guard**: start the node-side watchdog (guard.py) where `memory.guard` says.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable

from sparkctl.connectors.pool import NodePool
from sparkctl.engines.support.launch_check import Serving
from sparkctl.errors import SparkctlError
from sparkctl.fanout import fan_out
from sparkctl.lifecycle import guard, state
from sparkctl.lifecycle.admission import GIB, NodeMemory, Verdict, judge, parse_size
from sparkctl.planning.build import Plan, RankSpec
from sparkctl.profile.schema import Profile
from sparkctl.units import human_bytes

RECENT_STOP_S = 600.0  # a stop older than this says nothing about what is still resident
SETTLE_POLL_S = 0.5

# Stdlib only, run in the engine's image with the GPU: the CUDA driver's free memory per device.
CUDA_PROBE = """import ctypes,json
c=ctypes.CDLL("libcuda.so.1")
def ok(r,w):
    if r: raise SystemExit("%s failed: %d"%(w,r))
ok(c.cuInit(0),"cuInit");n=ctypes.c_int();ok(c.cuDeviceGetCount(ctypes.byref(n)),"cuDeviceGetCount")
out=[]
for i in range(n.value):
    d=ctypes.c_int();ok(c.cuDeviceGet(ctypes.byref(d),i),"cuDeviceGet")
    x=ctypes.c_void_p();ok(c.cuCtxCreate_v2(ctypes.byref(x),0,d),"cuCtxCreate")
    f=ctypes.c_size_t();t=ctypes.c_size_t();ok(c.cuMemGetInfo_v2(ctypes.byref(f),ctypes.byref(t)),"cuMemGetInfo")
    out.append([f.value,t.value]);c.cuCtxDestroy_v2(x)
print(json.dumps(out))"""


class AdmissionError(SparkctlError):
    """A start refused: its memory budget does not fit (nothing was started)."""


def _file(cluster: str):
    return state.cluster_file(cluster, ".memory.json")


def _load(cluster: str) -> dict:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(_file(cluster).read_text())
        return data if isinstance(data, dict) else {}
    return {}


def _save(cluster: str, data: dict) -> None:
    path = _file(cluster)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)


def note_stopped(cluster: str | None, nodes: list[str]) -> None:
    """Containers of the cluster were just stopped on these nodes: the next start there settles."""
    if not cluster or not nodes:
        return
    data = _load(cluster)
    for node in nodes:
        data.setdefault(node, {})["stopped_at"] = time.time()
    _save(cluster, data)


def read_memory(pool: NodePool, node: str) -> NodeMemory:
    from sparkctl.facts.gpu import MEMINFO_ARGV, parse_meminfo

    res = pool.get(node).run(list(MEMINFO_ARGV), timeout=15).check("reading /proc/meminfo")
    kib = parse_meminfo(res.stdout)
    return NodeMemory(
        node,
        kib.get("MemAvailable", 0) * 1024,
        kib.get("MemFree", 0) * 1024,
        kib.get("MemTotal", 0) * 1024,
        kib.get("Cached", 0) * 1024,
    )


def cuda_free(pool: NodePool, spec: RankSpec) -> int | None:
    """The smallest CUDA free memory of the node's GPUs, probed once in the engine's image; None
    when the rank gets no GPU (the testbed) or the probe fails (the caller falls back)."""
    if not spec.options.gpus:
        return None
    from docker.types import DeviceRequest

    try:
        out = (
            pool.get(spec.node)
            .docker()
            .containers.run(
                spec.image,
                ["python3", "-S", "-c", CUDA_PROBE],
                entrypoint=[],
                device_requests=[DeviceRequest(count=-1, capabilities=[["gpu"]])],
                network_mode="none",
                remove=True,
            )
        )
        devices = json.loads(out.decode().strip().splitlines()[-1])
        return min(free for free, _ in devices) if devices else None
    except Exception:  # noqa: BLE001 - any failure: MemAvailable is the budget, and says so
        return None


def settle_targets(data: dict, nodes: list[str], now: float, margin: int) -> dict[str, int]:
    """{node: MemAvailable to wait for}: the nodes whose ranks were stopped since their last start
    (and recently), each back to its level before that start, less the margin."""
    out = {}
    for node in nodes:
        rec = data.get(node, {})
        stopped, before = rec.get("stopped_at"), rec.get("before")
        if stopped and before and stopped >= rec.get("at", 0) and now - stopped < RECENT_STOP_S:
            out[node] = int(before) - margin
    return out


def settle(
    profile: Profile, pool: NodePool, plan: Plan, nodes: list[str], say: Callable[[str], None]
) -> None:
    """Wait on each node stopped recently until MemAvailable is back near its pre-start level."""
    margin = int(profile.memory.settle_margin_gib * GIB)
    todo = settle_targets(_load(plan.cluster), nodes, time.time(), margin)
    if todo:
        fan_out(list(todo), lambda n: _settle_one(pool, n, todo[n], profile.memory.settle_timeout, say))


def _settle_one(pool: NodePool, node: str, target: int, timeout: float, say: Callable[[str], None]) -> None:
    t0 = time.monotonic()
    next_say = t0
    while True:
        avail = read_memory(pool, node).mem_available
        waited = time.monotonic() - t0
        if avail >= target:
            if waited >= SETTLE_POLL_S:
                say(f"{node}: memory settled ({human_bytes(avail)} available) after {waited:.1f}s")
            return
        if waited >= timeout:
            say(
                f"{node}: memory did not settle within {timeout:.0f}s ({human_bytes(avail)} available, "
                f"{human_bytes(target)} wanted): admission decides"
            )
            return
        if time.monotonic() >= next_say:
            say(
                f"{node}: waiting for memory to settle after the stop: {human_bytes(avail)} available, "
                f"{human_bytes(target)} wanted ({waited:.0f}s of {timeout:.0f}s)"
            )
            next_say = time.monotonic() + 5
        time.sleep(SETTLE_POLL_S)


def _planner(profile: Profile, spec: RankSpec) -> Callable[[float, int], Serving | None]:
    """The engine's memory model at a given fraction and MemAvailable, when the model's facts are
    on this machine (looked up only when a refusal needs it); None from it otherwise."""
    from sparkctl.engines import get_engine

    engine = get_engine(profile.engine.kind)

    def at(fraction: float, seen: int) -> Serving | None:
        try:
            serving = engine.memory.serving if engine.memory else None
            return serving(profile, spec.argv, spec.node, fraction, seen) if serving else None
        except Exception:  # noqa: BLE001 - no model facts here: the fix names the fraction only
            return None

    return at


def admit(profile: Profile, pool: NodePool, plan: Plan, nodes: list[str]) -> dict[str, NodeMemory]:
    """Judge every unified node of the plan; raise AdmissionError naming the first refused one."""
    from sparkctl.engines import get_engine

    model = get_engine(profile.engine.kind).memory

    def one(node: str) -> tuple[NodeMemory, Verdict | None]:
        specs = [s for s in plan.ranks if s.node == node]
        mem = read_memory(pool, node)
        if model is None:  # the engine reserves no fixed fraction: nothing to admit by
            return mem, None
        probed = cuda_free(pool, specs[0]) if specs and profile.memory.admission else None
        if probed is not None:
            mem = NodeMemory(mem.node, mem.mem_available, mem.mem_free, mem.mem_total, mem.cached, probed)
        opts = specs[0].options if specs else None
        shm = parse_size(opts.shm_size) if opts and opts.ipc_mode != "host" else 0
        fraction = (model.fraction(specs[0].argv) if specs else None) or model.gb10_max
        planner = _planner(profile, specs[0]) if specs and profile.memory.admission else None
        reserve = int(profile.memory.reserve_gib * GIB)
        return mem, judge(
            mem,
            fraction=fraction,
            ranks=len(specs),
            shm=shm,
            reserve=reserve,
            flag=model.flag,
            planner=planner,
        )

    results = fan_out(nodes, one).values_or_raise()
    if profile.memory.admission:
        for node, (_, v) in results.items():
            if v is not None and not v.ok:
                raise AdmissionError(
                    v.message(), node=node, fix="; or ".join(v.fixes) or "free memory on the node"
                )
    return {node: mem for node, (mem, _) in results.items()}


def gate(profile: Profile, pool: NodePool, plan: Plan, say: Callable[[str], None]) -> None:
    """Settle, admit, remember, guard: before `start_group` creates any container of `plan`."""
    nodes = guard.unified_nodes(profile, [s.node for s in plan.ranks])
    if nodes:
        settle(profile, pool, plan, nodes, say)
        mems = admit(profile, pool, plan, nodes)
        data, now = _load(plan.cluster), time.time()
        for node, mem in mems.items():
            data[node] = {"before": mem.mem_available, "at": now}
        _save(plan.cluster, data)
    guard_running(profile, pool, plan, say)


def guard_running(profile: Profile, pool: NodePool, plan: Plan, say: Callable[[str], None]) -> None:
    """The memory guard runs on the plan's guarded nodes with this profile's settings (and, when
    it is off, `--no-guard` or `memory.guard.enabled: false`, no longer runs there)."""
    nodes = [s.node for s in plan.ranks]
    if profile.memory.guard.enabled is False:
        guard.stop(profile, pool, [n for n in guard.nodes_to_read(profile) if n in nodes])
        return
    guarded = guard.guarded_nodes(profile, nodes)
    if guarded:
        started = guard.ensure(profile, pool, guarded)
        fresh = [n for n, out in started.items() if out.get("started")]
        if fresh:
            say("memory guard started on " + ", ".join(fresh))
