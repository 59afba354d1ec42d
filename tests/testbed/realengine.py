"""The real-engine tier's lab setup: the vLLM CPU image and the tiny Qwen3 on every node, and a
lab profile with `engine.kind: vllm` (CPU settings from the shared vllm-cpu reference)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.testbed.lab import NODE_MOUNT, Lab
from tests.testbed.profiles import write_lab_profile
from tests.testbed.tiny_model import MODEL_ID, commit, seed_tiny_model
from tests.testbed.vllm_image import VLLM_TAG, install_vllm_image

SERVED = "tiny"
VLLM_PORT = 30000
# CPU serving: 1 GiB of KV cache, no torch.compile (no g++ in the image; TP also compiles one
# embedding function in eager mode without TORCHDYNAMO_DISABLE), no OpenMP core binding (the
# lab's nodes share the host's cores), one OpenMP thread per rank (the host is shared).
CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "TORCHDYNAMO_DISABLE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
}
CPU_ARGS: dict[str, Any] = {"max-model-len": 512, "enforce-eager": True, "max-num-seqs": 8}


def install_real_engine(lab: Lab) -> dict[str, Any]:
    """Image (built once per recipe, else loaded from the host's cache) and model on every node;
    returns the timings."""
    t0 = time.monotonic()
    timings = install_vllm_image(lab)
    t1 = time.monotonic()
    seed_tiny_model(lab)
    return {**timings, "model_s": time.monotonic() - t1, "total_s": time.monotonic() - t0}


def write_vllm_profile(
    lab: Lab,
    path: Path,
    *,
    modes: dict[str, Any] | None = None,
    engine: dict[str, Any] | None = None,
    image: str = VLLM_TAG,
    **top: Any,
) -> Path:
    eng: dict[str, Any] = {
        "kind": "vllm",
        "port": VLLM_PORT,
        "served_model_name": SERVED,
        "ready_timeout": 600,
        "log_dir": f"{NODE_MOUNT}/logs",
        "container": {"gpus": False, "shm_size": "1g"},
        "args": dict(CPU_ARGS),
        "env": dict(CPU_ENV),
        "stop_grace": 20,
    }
    eng.update(engine or {})
    model = {
        "target": {"id": MODEL_ID, "revision": commit()},
        "hf_cache": f"{NODE_MOUNT}/hf",
        "triton_cache": f"{NODE_MOUNT}/triton",
    }
    modes = modes or {
        "solo": {"nodes": ["spark1"], "tp": 1, "default": True},
        "tp2": {"nodes": ["spark1", "spark2"], "tp": 2},
    }
    return write_lab_profile(lab, path, image=image, modes=modes, engine=eng, model=model, **top)


# vllm/vllm-openai's shape (issue 46): `vllm serve` as ENTRYPOINT, no CMD, over the CPU build.
OPENAI_SHAPE_TAG = "sparkctl-test/vllm-openai-shape:0.32.0"


def build_openai_shape(lab: Lab, node: str = "spark1") -> str:
    """The CPU image with vllm/vllm-openai's ENTRYPOINT on `node`: a config-only change over the
    base, so `sparkctl ship --image` moves next to nothing to the other nodes."""
    import io
    import tarfile

    text = f'FROM {VLLM_TAG}\nENTRYPOINT ["vllm", "serve"]\nCMD []\n'.encode()
    ctx = io.BytesIO()
    with tarfile.open(fileobj=ctx, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text))
    ctx.seek(0)
    lab.docker(node).images.build(
        fileobj=ctx, custom_context=True, tag=OPENAI_SHAPE_TAG, rm=True, forcerm=True
    )
    return OPENAI_SHAPE_TAG


def write_fleet_profile(lab: Lab, path: Path, image: str, engine: dict[str, Any]) -> Path:
    """A fleet of two tiny models (docs/fleet.md): `chat` (the tier's model) solo on spark1, and
    `coder` (SECOND_ID: other weights), on demand, idle-stopped after 10 s, in mode `a` on spark2
    or `b` on spark1. Ports assigned by sparkctl; the fleet's gateway on spark1."""
    import yaml

    from tests.testbed.tiny_model import SECOND_ID

    write_vllm_profile(lab, path, engine=engine, image=image)
    doc = yaml.safe_load(path.read_text())
    base = {k: doc.pop(k) for k in ("image", "model", "engine", "modes")}
    base["engine"].pop("port")

    def service(served: str, model_id: str, modes: dict[str, Any], **extra: Any) -> dict[str, Any]:
        model = {**base["model"], "target": {**base["model"]["target"], "id": model_id}}
        return {
            **base,
            "model": model,
            "engine": {**base["engine"], "served_model_name": served},
            "modes": modes,
            **extra,
        }

    doc["models"] = {
        "chat": service("tiny-chat", MODEL_ID, {"solo": {"nodes": ["spark1"], "default": True}}),
        "coder": service(
            "tiny-coder",
            SECOND_ID,
            {"a": {"nodes": ["spark2"], "default": True}, "b": {"nodes": ["spark1"]}},
            on_demand=True,
            idle_stop="10s",
        ),
    }
    doc["gateway"] = {"node": "spark1", "port": 8000, "wait_s": 300}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
