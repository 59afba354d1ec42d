"""Sparkctl profiles for a running testbed Lab: real SSH addresses, host keys, fabric, paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.testbed.lab import NODE_MOUNT, Lab

ENGINE_IMAGE = "sparkctl-test/engine:latest"
ENGINE_PORT = 30000
TARGET_ID = "test-org/tiny-model"
DRAFT_ID = "test-org/tiny-draft"
SEED_COMMIT = "0123456789abcdef0123456789abcdef01234567"


def topology_modes() -> dict[str, Any]:
    """Modes of a 4-node lab (issue #19): TP over all four, two TP=2 replicas, one replica on
    each of two boxes (the last two behind sglang-router, on spark1)."""
    four = ["spark1", "spark2", "spark3", "spark4"]
    return {
        "tp4": {"nodes": four, "tp": 4},
        "tp2x2": {"nodes": four, "tp": 2, "replicas": 2},
        "dp2": {"nodes": ["spark1", "spark2"], "tp": 1, "replicas": 2},
    }


def lab_profile(
    lab: Lab,
    *,
    cluster: str | None = None,
    image: str = ENGINE_IMAGE,
    modes: dict[str, Any] | None = None,
    transport: str = "tcp",
    engine: dict[str, Any] | None = None,
    **top: Any,
) -> dict[str, Any]:
    """A profile dict for `lab`: every node over SSH (the test process is the controller).

    Default modes: `solo` on spark1, `tp2` across spark1+spark2 (when the lab has 2+ nodes), and
    `topology_modes()` on a lab of 4+ nodes.
    `engine`/`top` entries are merged over the defaults (shallow for `engine`).
    """
    nodes = []
    for node in lab.nodes:
        nodes.append(
            {
                "name": node.name,
                "address": node.mgmt_ip,
                "user": "root",
                "port": node.ssh_port,
                "key": lab.ssh_key,
                "gpus": 1,
                "fabric": {"netdevs": [node.fabric_netdev], "ip": node.fabric_ip, "hcas": "auto"},
            }
        )
    if modes is None:
        modes = {"solo": {"nodes": ["spark1"], "tp": 1, "default": True}}
        if len(lab.nodes) > 1:
            modes["tp2"] = {"nodes": ["spark1", "spark2"], "tp": 2}
        if len(lab.nodes) >= 4:
            modes |= topology_modes()
    eng: dict[str, Any] = {
        "port": ENGINE_PORT,
        "served_model_name": "tiny-test",
        "ready_timeout": 120,
        "log_dir": f"{NODE_MOUNT}/logs",
        "container": {"gpus": False, "shm_size": "64m"},
        "args": {"context-length": 4096},
        # The lab's nodes are network namespaces on this machine: a keyless API on their addresses
        # is intended here (security tests set a key or expose: private themselves).
        "expose": "public",
    }
    eng.update(engine or {})
    profile: dict[str, Any] = {
        "cluster": cluster or f"lab{lab.id}",
        "ssh": {"known_hosts": lab.known_hosts, "host_key_policy": "strict", "connect_timeout": 5},
        "fabric": {"mtu": 9000, "transport": transport, "dist_init_port": 50051},
        "nodes": nodes,
        "image": {"ref": image},
        "model": {
            "target": {"id": TARGET_ID, "revision": "main"},
            "draft": {"id": DRAFT_ID, "revision": "main"},
            "hf_cache": f"{NODE_MOUNT}/hf",
            "triton_cache": f"{NODE_MOUNT}/triton",
        },
        "engine": eng,
        "modes": modes,
    }
    profile.update(top)
    return profile


def write_lab_profile(lab: Lab, path: Path, **kwargs: Any) -> Path:
    path.write_text(yaml.safe_dump(lab_profile(lab, **kwargs), sort_keys=False))
    return path


def seed_weights(lab: Lab, nodes: list[str] | None = None, commit: str = SEED_COMMIT) -> None:
    """A small HF-cache snapshot (refs/main -> commit, config.json + a shard) of the lab profile's
    target and draft on the given nodes (default: all), as `huggingface-cli download` leaves it."""
    for node in lab.nodes:
        if nodes is not None and node.name not in nodes:
            continue
        for model_id in (TARGET_ID, DRAFT_ID):
            repo = Path(node.node_root, "hf", "hub", "models--" + model_id.replace("/", "--"))
            snap = repo / "snapshots" / commit
            snap.mkdir(parents=True, exist_ok=True)
            (repo / "refs").mkdir(exist_ok=True)
            (repo / "refs" / "main").write_text(commit)
            (snap / "config.json").write_text('{"model_type": "qwen3"}\n')
            (snap / "model.safetensors").write_bytes(model_id.encode() * 1024)


DP2 = {"nodes": ["spark1", "spark2"], "tp": 1, "replicas": 2}


def write_rolling_profile(
    lab: Lab, path: Path, gen_delay: float = 0.3, policy: str = "round_robin", **engine_env: str
) -> Path:
    """`dp2` (a stand-in replica per node behind the real sglang-router), `dp2b` (same layout,
    another config) and `dp2bad` (same layout, never comes up); metrics on (the rolling switch's
    drain signal); every request taking `gen_delay` s so requests are in flight when a replica
    leaves the router; fast router checks. `round_robin` spreads a load of identical prompts
    over both replicas (`cache_aware`, the default, may keep them all on one).
    """
    modes = {
        "solo": {"nodes": ["spark1"], "tp": 1, "default": True},
        "dp2": dict(DP2),
        "dp2b": {**DP2, "env": {"ROLL_MARK": "b"}},
        "dp2bad": {**DP2, "env": {"STANDIN_FAIL_AT": "0:load"}},  # every replica dies loading
    }
    engine = {
        "args": {"context-length": 4096, "enable-metrics": True},
        "env": {"STANDIN_GEN_DELAY": str(gen_delay), **engine_env},
        "stop_grace": 5,
    }
    router = {
        "policy": policy,
        "health_check_interval": 1,
        "health_failure_threshold": 2,
        "drain_timeout": 30,
    }
    return write_lab_profile(lab, path, modes=modes, engine=engine, router=router)
