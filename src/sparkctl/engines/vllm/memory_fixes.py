"""What each change to a vLLM launch that does not fit gives up, with its number: a larger
--gpu-memory-utilization (what it leaves outside vLLM's share), a shorter --max-model-len (the
longest request), fp8 KV (its documented quality cost), more GPUs per replica (only a tp the node's
GPUs and the model's heads allow). Pure; memory.py calls it with its own figures."""

from __future__ import annotations

from dataclasses import dataclass

from sparkctl.engines.support.launch_check import FP8_KV_COST
from sparkctl.engines.vllm import flags as F

GIB = 1 << 30
KV_MARGIN = 1.1  # the KV cache a fix asks for: one sequence plus 10 % (activations are not modelled)
LEN_STEP = 256
MAX_FRACTION = 0.95  # above it the CUDA context and other processes have next to nothing


@dataclass(frozen=True)
class Budget:
    """One GPU's figures: total and free memory, the fraction asked, the weights' share on it."""

    total: float
    free: float | None
    fraction: float
    weights: float
    unified: bool

    @property
    def cap(self) -> float:
        cap = F.GB10_MAX_MEM_FRACTION if self.unified else MAX_FRACTION
        return min(cap, self.free / self.total - 0.02) if self.free is not None else cap

    def outside(self, fraction: float) -> str:
        return f"{(1 - fraction) * self.total / GIB:.2f} GiB"


def _raise_fraction(b: Budget, need: float) -> str | None:
    u = round(need / b.total + 0.005, 2)
    if u > b.cap or u <= b.fraction:
        return None
    return (
        f"--{F.MEM_FLAG} {u:.2f}: {b.outside(u)} instead of {b.outside(b.fraction)} left outside vLLM's "
        "share (the CUDA context, other processes; on unified memory the host)"
    )


def _more_gpus(
    tp: int, gpus: int, node: str, heads: int | None, kv_heads: int | None, weights: float
) -> str | None:
    """A tp the node's GPUs hold and the model's attention heads divide (None: none)."""
    for more in range(tp + 1, gpus + 1):
        if heads and heads % more:
            continue
        if kv_heads and kv_heads % more and more % kv_heads:
            continue
        per = weights * tp / more
        return (
            f"a mode with tp: {more} on {node} ({gpus} GPUs): {per / GIB:.2f} GiB of weights per GPU "
            "instead of " + f"{weights / GIB:.2f} GiB, one more all-reduce hop per layer on every token"
        )
    return None


def weights_fixes(b: Budget, tp: int, gpus: int, node: str, heads: int | None, kv_heads: int | None) -> str:
    """When the weights' share alone takes the budget: each way out with what it costs."""
    out = [
        f
        for f in (_raise_fraction(b, b.weights + GIB), _more_gpus(tp, gpus, node, heads, kv_heads, b.weights))
        if f
    ]
    return "; or ".join(out) or "a smaller (more quantized) model: these GPUs cannot hold this one's weights"


def kv_fixes(b: Budget, per_token: int, seq: int, fp8: bool) -> str:
    """When one --max-model-len sequence's KV does not fit what the weights leave."""
    left = b.fraction * b.total - b.weights
    out = []
    fits = int(left / KV_MARGIN / per_token) // LEN_STEP * LEN_STEP
    if fits >= LEN_STEP:
        out.append(f"--max-model-len {fits}: requests of at most {fits} tokens instead of {seq}")
    if not fp8:
        half = per_token * seq / 2
        enough = "" if half * KV_MARGIN <= left else " (not enough alone)"
        out.append(
            f"--kv-cache-dtype fp8 (sm89+): {half / GIB:.2f} GiB for one {seq}-token sequence instead of "
            f"{2 * half / GIB:.2f} GiB{enough}; {FP8_KV_COST}"
        )
    raised = _raise_fraction(b, b.weights + per_token * seq * KV_MARGIN)
    if raised:
        out.append(raised)
    return "; or ".join(out)
