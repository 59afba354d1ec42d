"""One rank of the fabric test: run inside the serving image, print one JSON line per event.

This file is copied into the container and run with the image's own python and torch, so it
imports only the standard library and torch (no sparkctl). It joins a torch.distributed group
through the same `tcp://<dist-init-addr>` rendezvous the engine uses, runs all-reduce and all-gather
over a few sizes, and reports bus bandwidth with the nccl-tests formulas:

    all_reduce  busbw = algbw * 2(n-1)/n      (size = the buffer reduced)
    all_gather  busbw = algbw * (n-1)/n       (size = the whole gathered buffer)

Every line it prints that starts with `{"event": ` is a result; everything else (NCCL_DEBUG
lines, warnings) is left in the stream for the orchestrator to quote when a rank fails.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import sys
import time
import traceback

# Environment a rank reports back (what it really saw). Never secrets: fixed prefixes only.
_ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_", "CUDA_VISIBLE_DEVICES", "MASTER_")
_ENV_SUFFIXES = ("_HOST_IP",)  # the engine's advertised address (MultiNode.host_ip_env)
_NCCL_CONF_FILES = ("/etc/nccl.conf", os.path.expanduser("~/.nccl.conf"))


def emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}, sort_keys=False), flush=True)


def parse_sizes(text: str) -> list[int]:
    """'1M,16M,1G' -> bytes. Suffixes K/M/G are binary (KiB/MiB/GiB), like nccl-tests."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    out = []
    for part in text.split(","):
        part = part.strip().upper()
        if not part:
            continue
        mult = units.get(part[-1], 1)
        out.append(int(float(part[:-1] if part[-1] in units else part) * mult))
    return out


def bus_factor(op: str, world: int) -> float:
    if op == "all_reduce":
        return 2 * (world - 1) / world
    if op == "all_gather":
        return (world - 1) / world
    raise ValueError(op)


def _nccl_conf() -> dict[str, str]:
    found = {}
    for path in _NCCL_CONF_FILES:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                found[path] = fh.read()[:4000]
        except OSError:
            pass
    return found


def _versions(torch, backend: str) -> dict[str, object]:
    info: dict[str, object] = {"torch": torch.__version__, "python": sys.version.split()[0]}
    if backend == "nccl":
        info["cuda"] = torch.version.cuda
        nccl = torch.cuda.nccl.version()
        info["nccl"] = ".".join(str(x) for x in nccl) if isinstance(nccl, tuple) else str(nccl)
        dev = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(dev)
        info["device"] = {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "total_memory": props.total_memory,
        }
    return info


def _measure(
    torch, dist, op: str, size: int, world: int, rank: int, device, iters: int, warmup: int
) -> dict[str, object]:
    elem = 4  # float32, as nccl-tests' default
    if op == "all_reduce":
        count = max(1, size // elem)
        buf = torch.full((count,), float(rank + 1), dtype=torch.float32, device=device)

        def step() -> None:
            dist.all_reduce(buf)

        nbytes = count * elem
    else:
        count = max(1, size // elem // world)
        src = torch.full((count,), float(rank + 1), dtype=torch.float32, device=device)
        out = torch.empty((count * world,), dtype=torch.float32, device=device)
        # Renamed in torch 2.13; images carry older torch too.
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

        def step() -> None:
            gather(out, src)

        nbytes = count * world * elem

    # Correctness once, on fresh data, before repeated in-place reductions change the values.
    step()
    _sync(torch, device)
    if op == "all_reduce":
        expected = world * (world + 1) / 2
        correct = bool(torch.all(buf == expected).item())
    else:
        want = torch.arange(1, world + 1, dtype=torch.float32, device=device).repeat_interleave(count)
        correct = bool(torch.equal(out, want))
    for _ in range(warmup):
        step()
    _sync(torch, device)
    t0 = time.perf_counter()
    for _ in range(iters):
        step()
    _sync(torch, device)
    seconds = (time.perf_counter() - t0) / iters
    algbw = nbytes / seconds / 1e9
    return {
        "op": op,
        "bytes": nbytes,
        "iters": iters,
        "time_us": round(seconds * 1e6, 2),
        "algbw_gbps": round(algbw, 3),
        "busbw_gbps": round(algbw * bus_factor(op, world), 3),
        "correct": correct,
    }


def _sync(torch, device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dist-init-addr", required=True, help="host:port of rank 0's rendezvous")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    ap.add_argument("--local-device", type=int, default=0, help="CUDA device index for this rank")
    ap.add_argument("--sizes", default="1M,16M,128M,1G")
    ap.add_argument("--ops", default="all_reduce,all_gather")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--timeout-s", type=float, default=120.0, help="torch.distributed timeout")
    return ap


def _start(torch, args: argparse.Namespace):  # torch module -> torch.device
    """Pick the device and report what this rank runs with (versions, NCCL env, nccl.conf)."""
    env = {
        k: v
        for k, v in sorted(os.environ.items())
        if k.startswith(_ENV_PREFIXES) or k.endswith(_ENV_SUFFIXES)
    }
    if args.backend == "nccl":
        torch.cuda.set_device(args.local_device)
        device = torch.device("cuda", args.local_device)
    else:
        device = torch.device("cpu")
    emit(
        "start",
        rank=args.rank,
        world_size=args.world_size,
        backend=args.backend,
        hostname=socket.gethostname(),
        dist_init_addr=args.dist_init_addr,
        versions=_versions(torch, args.backend),
        env=env,
        nccl_conf=_nccl_conf(),
    )
    return device


def _rendezvous(dist, args: argparse.Namespace) -> None:  # torch.distributed
    t0 = time.perf_counter()
    dist.init_process_group(
        backend=args.backend,
        init_method=f"tcp://{args.dist_init_addr}",
        rank=args.rank,
        world_size=args.world_size,
        timeout=datetime.timedelta(seconds=args.timeout_s),
    )
    emit("phase", rank=args.rank, phase="rendezvous", seconds=round(time.perf_counter() - t0, 3))


def _warmup(torch, dist, device, args: argparse.Namespace) -> None:  # torch objects
    # The first collective builds the communicator (NCCL connects its rings here): a
    # fabric that hangs, hangs here ("NCCL appears to hang at warm-up").
    t0 = time.perf_counter()
    probe = torch.ones(1, device=device)
    dist.all_reduce(probe)
    _sync(torch, device)
    emit(
        "phase",
        rank=args.rank,
        phase="warmup",
        seconds=round(time.perf_counter() - t0, 3),
        ok=bool(probe.item() == args.world_size),
    )


def _measure_all(torch, dist, device, args: argparse.Namespace) -> None:  # torch objects
    for op in [o.strip() for o in args.ops.split(",") if o.strip()]:
        for size in parse_sizes(args.sizes):
            # Large buffers need few iterations to average out launch overhead.
            big = size >= (256 << 20)
            iters = max(3, args.iters // 4) if big else args.iters
            warmup = 1 if big else args.warmup
            res = _measure(torch, dist, op, size, args.world_size, args.rank, device, iters, warmup)
            emit("result", rank=args.rank, **res)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    phase = "setup"  # import torch, pick the device
    try:
        import torch
        import torch.distributed as dist

        device = _start(torch, args)
        phase = "rendezvous"
        _rendezvous(dist, args)
        phase = "warmup"
        _warmup(torch, dist, device, args)
        phase = "measure"
        _measure_all(torch, dist, device, args)
        dist.destroy_process_group()
        emit("done", rank=args.rank)
        return 0
    except Exception as exc:  # report every failure as data; the orchestrator decides
        emit(
            "error",
            rank=args.rank,
            phase=phase,
            error=f"{type(exc).__name__}: {exc}"[:2000],
            traceback=traceback.format_exc(limit=6)[-3000:],
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
