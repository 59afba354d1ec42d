"""What a rank's container gets besides its argv: env (home, NCCL over the fabric, secrets), mounts, GPUs.

Pure, like the rest of planning: build.py calls these once per rank.
"""

from __future__ import annotations

import posixpath

from sparkctl.engines.base import Engine, RankLayout
from sparkctl.planning import hardening as sec
from sparkctl.planning.hardening import Mount
from sparkctl.planning.managed import check_env_overrides
from sparkctl.planning.model import PlanFacts
from sparkctl.profile.derived import node_path
from sparkctl.profile.schema import Mode, Node, Profile
from sparkctl.secrets import SecretFile, SecretRef


def fabric_env(
    profile: Profile,
    node: Node,
    facts: PlanFacts,
    unresolved: list[str],
    engine_env: dict[str, str],
    nnodes: int,
) -> dict[str, str]:
    assert node.fabric is not None  # schema guarantees it for multi-node modes
    ifnames = ",".join(node.fabric.netdevs)
    env = {"NCCL_SOCKET_IFNAME": ifnames, "GLOO_SOCKET_IFNAME": ifnames, **engine_env}
    if profile.fabric.layout == "ring" and nnodes >= 3:
        env["NCCL_ALGO"] = "Ring"  # a switchless ring: NCCL's tree would route through a non-neighbour
    if profile.fabric.transport == "tcp":
        env["NCCL_IB_DISABLE"] = "1"
        return env
    gid = node.fabric.gid_index
    if gid == "auto":
        gid = facts.gid_index.get(node.name)
        if gid is None and node.name not in facts.gid_index:
            unresolved.append(f"{node.name}: fabric.gid_index is 'auto' (read from sysfs by preflight)")
    if gid is not None:
        env["NCCL_IB_GID_INDEX"] = str(gid)
    hcas = node.fabric.hcas
    if hcas == "auto":
        if node.name in facts.hcas:
            hcas = facts.hcas[node.name]
        else:
            unresolved.append(f"{node.name}: fabric.hcas is 'auto' (resolved from sysfs by preflight)")
            hcas = ["<auto>"]
    env["NCCL_IB_HCA"] = ",".join(hcas)
    return env


def gpu_request(node: Node, gpu_ids: tuple[int, ...], profile: Profile) -> str | None:
    """Docker's GPU request: every GPU of the node, or the ids of this rank's share of them."""
    if not profile.engine.container.gpus:
        return None
    return "all" if len(gpu_ids) >= node.gpus else ",".join(str(i) for i in gpu_ids)


def rank_env_mounts(
    profile: Profile,
    mode: Mode,
    node: Node,
    layout: RankLayout,
    engine: Engine,
    facts: PlanFacts,
    unresolved: list[str],
) -> tuple[dict[str, str | SecretRef], list[Mount], list[SecretFile]]:
    """The rank's env (home, NCCL, the profile's and mode's env, secrets), mounts and secret files."""
    env: dict[str, str | SecretRef] = {
        **sec.container_home(profile.engine.container.user or engine.default_user)
    }
    if mode.tp > 1:
        env |= {"NCCL_CUMEM_ENABLE": "0", "NCCL_NVLS_ENABLE": "0"}
    if layout.nnodes > 1:
        rank_env = engine.rank_env(profile, node, layout)
        env |= fabric_env(profile, node, facts, unresolved, rank_env, layout.nnodes)
    if profile.engine.offline:
        env["HF_HUB_OFFLINE"] = "1"  # serve the snapshot `ship` put in the cache; never fetch code
    check_env_overrides(profile, mode, env)
    env |= profile.engine.env
    env |= mode.env
    secret_env, secret_mounts, secret_files = sec.secret_delivery(profile, node, node_path, engine.auth)
    env |= secret_env
    # Only the hub cache: $HF_HOME/token (the node user's login) stays out of the container.
    hf_hub = posixpath.join(node_path(node.hf_cache or profile.model.hf_cache, node, profile), "hub")
    triton = node_path(node.triton_cache or profile.model.triton_cache, node, profile)
    hf_home, triton_dir = str(env["HF_HOME"]), str(env["TRITON_CACHE_DIR"])
    mounts = [Mount(hf_hub, f"{hf_home}/hub"), Mount(triton, triton_dir), *secret_mounts]
    index = next(i for i, n in enumerate(profile.nodes) if n.name == node.name)
    sec.no_host_code_in(
        mounts, node, node_path("~/.cache/sparkctl", node, profile), node_path("~", node, profile), index
    )
    return env, mounts, secret_files
