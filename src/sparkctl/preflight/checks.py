"""The pure half of every check: facts in, Findings (with a fix) out. No I/O here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkctl.findings import Finding, Severity
from sparkctl.gpu.probe import GpuReport
from sparkctl.plan import Plan
from sparkctl.preflight.parsers import DiskUsage, Netdev, PingResult, RepoListing, resolve_revision
from sparkctl.preflight.probes import ContainerFacts, DockerFacts, ImageFacts
from sparkctl.profile.schema import Node, Profile
from sparkctl.units import human_bytes

OK, WARN, ERROR, SKIP = Severity.OK, Severity.WARN, Severity.ERROR, Severity.SKIP
GIB = 1 << 30


# ----------------------------------------------------------------------------- fabric
def check_fabric_netdevs(node: Node, netdevs: Mapping[str, Netdev], mtu: int) -> list[Finding]:
    """FabricNetdev + Mtu for one node."""
    assert node.fabric is not None
    out: list[Finding] = []
    ip = str(node.fabric.ip)
    for name in node.fabric.netdevs:
        dev = netdevs.get(name)
        if dev is None:
            present = ", ".join(n for n in sorted(netdevs) if n != "lo")
            out.append(Finding("FabricNetdev", ERROR, f"netdev {name} does not exist (present: {present})",
                               f"fix nodes[{node.name}].fabric.netdevs (`ip -br link` on {node.name})",
                               node=node.name))  # fmt: skip
            out.append(Finding("Mtu", SKIP, f"{name}: netdev missing", node=node.name))
            continue
        if not dev.up:
            out.append(Finding("FabricNetdev", ERROR, f"{name} is {dev.operstate} (flags {','.join(dev.flags)})",
                               f"`sudo ip link set {name} up` on {node.name}; check the cable", node=node.name,
                               data=dev.to_json()))  # fmt: skip
        else:
            speed = f", {dev.speed_mbps // 1000} Gb/s" if dev.speed_mbps else ""
            out.append(Finding("FabricNetdev", OK, f"{name} up{speed} {','.join(dev.ipv4) or 'no IPv4'}",
                               node=node.name, data=dev.to_json()))  # fmt: skip
        if dev.mtu != mtu:
            sev = ERROR if dev.mtu < mtu else WARN
            out.append(Finding("Mtu", sev, f"{node.name} {name} has MTU {dev.mtu}, profile fabric.mtu is {mtu}",
                               f"`sudo ip link set dev {name} mtu {mtu}` on {node.name} (and persist it in "
                               "netplan/NetworkManager); every fabric netdev on every node must match",
                               node=node.name, data={"netdev": name, "mtu": dev.mtu, "want": mtu}))  # fmt: skip
        else:
            out.append(Finding("Mtu", OK, f"{name} MTU {dev.mtu}", node=node.name))
    holders = [d.name for d in netdevs.values() if ip in d.ips]
    if not any(h in node.fabric.netdevs for h in holders):
        where = f"it is on {', '.join(holders)}" if holders else "no netdev has it"
        out.append(Finding("FabricNetdev", ERROR, f"fabric IP {ip} is not on {','.join(node.fabric.netdevs)} ({where})",
                           f"assign it: `sudo ip addr add {ip}/24 dev {node.fabric.netdevs[0]}` on {node.name} "
                           "(persist in netplan), or fix nodes[].fabric.ip", node=node.name))  # fmt: skip
    return out


def check_ping_df(src: str, dst: str, ip: str, size: int, iface: str | None, res: PingResult) -> Finding:
    where = f"{src} -> {dst} ({ip}) {size} B DF" + (f" via {iface}" if iface else "")
    data = {"dst": dst, "ip": ip, "size": size, "sent": res.sent, "received": res.received}
    if res.ok:
        return Finding("PingDf", OK, f"{where}: {res.received}/{res.sent} replies", node=src, data=data)
    return Finding(
        "PingDf",
        ERROR,
        f"{where}: no reply ({res.error})",
        "MTU mismatch somewhere on the path (both nodes' fabric netdevs and any switch must allow "
        f"{size + 28} bytes) or the link is down; see the Mtu findings",
        node=src,
        data=data,
    )


def check_ssh_peer(rank0: str, peer: str, host: str, rc: int, stderr: str) -> Finding:
    where = f"{rank0} -> {peer} ({host})"
    if rc == 0:
        return Finding("SshRank0ToPeer", OK, f"{where}: passwordless SSH works", node=rank0)
    text = stderr.strip().splitlines()
    last = text[-1] if text else f"exit {rc}"
    low = stderr.lower()
    if rc == 127:
        return Finding(
            "SshRank0ToPeer", WARN, f"no ssh client on {rank0}", "install openssh-client", node=rank0
        )
    if any(s in low for s in ("refused", "timed out", "no route", "unreachable", "could not resolve")):
        return Finding("SshRank0ToPeer", ERROR, f"{where}: {last}",
                       f"{peer} is not reachable from {rank0} over the fabric: check the link, routing "
                       f"and that sshd on {peer} listens on {host}", node=rank0)  # fmt: skip
    hint = (
        f"on {rank0}: `ssh-keyscan -H {host} >> ~/.ssh/known_hosts` after checking the fingerprint"
        if "host key" in low
        else f"on {rank0}: `ssh-copy-id {host}` (or `sparkctl init --ssh-setup`)"
    )
    return Finding("SshRank0ToPeer", WARN, f"{where}: path works, login does not: {last}",
                   hint + "; sparkctl itself only needs SSH from this machine", node=rank0)  # fmt: skip


def check_host_ip(rank: int, node: str, host_ip: str, netdevs: Mapping[str, Netdev] | None,
                  fabric_netdevs: list[str], pings: Mapping[str, PingResult]) -> list[Finding]:  # fmt: skip
    """HostIpReachable: SGLANG_HOST_IP of one rank: assigned on its node, reachable from every peer."""
    out: list[Finding] = []
    if netdevs is not None:
        holders = [d.name for d in netdevs.values() if host_ip in d.ips]
        if not holders:
            out.append(Finding("HostIpReachable", ERROR, f"SGLANG_HOST_IP {host_ip} of rank {rank} is not assigned on {node}",
                               f"set nodes[{node}].fabric.ip to an address of {node}'s fabric netdev "
                               "(or fix the SGLANG_HOST_IP override in engine/mode env)", node=node, rank=rank))  # fmt: skip
        elif fabric_netdevs and not set(holders) & set(fabric_netdevs):
            out.append(Finding("HostIpReachable", WARN, f"SGLANG_HOST_IP {host_ip} of rank {rank} is on "
                               f"{','.join(holders)}, not the fabric ({','.join(fabric_netdevs)})",
                               "rendezvous traffic would take the LAN; use the fabric IP", node=node, rank=rank))  # fmt: skip
    for peer, res in sorted(pings.items()):
        if res.ok:
            out.append(
                Finding(
                    "HostIpReachable",
                    OK,
                    f"rank {rank} {host_ip} reachable from {peer}",
                    node=node,
                    rank=rank,
                )
            )
        else:
            out.append(Finding("HostIpReachable", ERROR, f"rank {rank} {host_ip} not reachable from {peer} ({res.error})",
                               f"the engine on {peer} cannot reach rank {rank}'s advertised address: check routing "
                               "and firewalls between the fabric IPs", node=node, rank=rank))  # fmt: skip
    return out


# ----------------------------------------------------------------------------- docker, GPUs
def check_docker(
    node: str, facts: DockerFacts, gpus_requested: bool, hook_present: bool | None
) -> list[Finding]:
    out = [Finding("DockerEngine", OK, f"Docker {facts.version} ({facts.root_dir})", node=node,
                   data={"version": facts.version, "runtimes": list(facts.runtimes)})]  # fmt: skip
    if gpus_requested:
        if "nvidia" in facts.runtimes or facts.default_runtime == "nvidia" or hook_present:
            out.append(Finding("DockerEngine", OK, "NVIDIA container runtime present", node=node))
        else:
            out.append(Finding("DockerEngine", ERROR, f"no NVIDIA runtime in Docker on {node} (runtimes: "
                               f"{', '.join(facts.runtimes) or 'none'}); containers cannot get GPUs",
                               "install nvidia-container-toolkit, then `sudo nvidia-ctk runtime configure "
                               "--runtime=docker && sudo systemctl restart docker`", node=node))  # fmt: skip
    return out


def check_gpus(node: Node, report: GpuReport | None, need: int, gpus_requested: bool) -> list[Finding]:
    if report is None:
        if gpus_requested:
            return [
                Finding(
                    "Gpus",
                    ERROR,
                    "nvidia-smi not found: no NVIDIA driver visible",
                    "install the NVIDIA driver (nvidia-smi must work on the node)",
                    node=node.name,
                )
            ]
        return [Finding("Gpus", SKIP, "no nvidia-smi (engine.container.gpus is false)", node=node.name)]
    gpus = report.gpus
    desc = ", ".join(sorted({f"{g.name} cc {g.compute_cap or '?'}" for g in gpus}))
    mem = report.usable_memory_mib
    memtxt = (
        f", usable {mem / 1024:.0f} GiB" + (" (unified, MemAvailable)" if report.unified_memory else "")
        if mem
        else ""
    )
    data = report.to_json()
    out: list[Finding] = []
    if len(gpus) < need:
        out.append(Finding("Gpus", ERROR, f"{len(gpus)} GPU(s) visible, the mode needs {need} here",
                           f"fix nodes[{node.name}].gpus or the mode's tp", node=node.name, data=data))  # fmt: skip
    else:
        out.append(Finding("Gpus", OK, f"{len(gpus)} x {desc}{memtxt}, driver {report.driver_version or '?'}",
                           node=node.name, data=data))  # fmt: skip
    facts = node.gpu
    if facts is not None:
        caps = {g.compute_cap for g in gpus if g.compute_cap}
        if caps and caps != {facts.compute_capability}:
            out.append(Finding("Gpus", WARN, f"profile says compute capability {facts.compute_capability}, "
                               f"nvidia-smi says {','.join(sorted(caps))}",
                               f"update nodes[{node.name}].gpu (the launch rules use it)", node=node.name))  # fmt: skip
    return out


# ----------------------------------------------------------------------------- image
def check_images(ref: str, images: Mapping[str, ImageFacts | None], rank0: str, pinned: str | None,
                 source: str) -> list[Finding]:  # fmt: skip
    """ImagePresent per node, then ImageSame across the nodes that have it (and vs image.id)."""
    out: list[Finding] = []
    have = {n: i for n, i in images.items() if i is not None}
    donor = rank0 if rank0 in have else next(iter(have), None)
    for node, img in images.items():
        if img is None:
            if donor:
                fix = f"`sparkctl ship --image --to {node}` (copies it from {donor})"
            elif source.startswith("recipe:"):
                fix = f"build it: `sparkctl image build {source.split(':', 1)[1]}`, then `sparkctl ship --image`"
            else:
                fix = f"`docker pull {ref}` on one node, then `sparkctl ship --image`"
            out.append(Finding("ImagePresent", ERROR, f"image {ref} not on {node}", fix, node=node))
        else:
            out.append(Finding("ImagePresent", OK, f"{ref} {img.id[:19]} ({human_bytes(img.size)})", node=node,
                               data={"id": img.id, "size": img.size}))  # fmt: skip
    if not have:
        return out
    want = pinned or (have[donor].id if donor else None)
    why = "image.id in the profile" if pinned else f"{donor} (rank 0)" if donor == rank0 else donor
    for node, img in have.items():
        if img.id == want:
            out.append(Finding("ImageSame", OK, f"same ID as {why}", node=node))
            continue
        ref_img = have.get(donor) if donor else None
        same_content = (ref_img is not None and img.layers and img.layers == ref_img.layers
                        and img.created == ref_img.created)  # fmt: skip
        if same_content and not pinned:
            out.append(Finding("ImageSame", WARN, f"{ref} on {node} has ID {img.id[:19]}, {why} has {want[:19]} "
                               "but the same layers (different image store/snapshotter?)",
                               "use the same Docker storage driver on every node", node=node))  # fmt: skip
            continue
        fix = (f"`sparkctl ship --image --to {node}` to replace it with {donor}'s copy" if not pinned
               else f"rebuild or pull the pinned image, or update image.id (now {pinned[:19]})")  # fmt: skip
        out.append(Finding("ImageSame", ERROR, f"{ref} on {node} is {img.id[:19]}, {why} has {want[:19]}",
                           fix, node=node, data={"id": img.id, "want": want}))  # fmt: skip
    return out


# ----------------------------------------------------------------------------- weights
def check_weights(role: str, repo_id: str, revision: str | None, listings: Mapping[str, RepoListing],
                  cache_dirs: Mapping[str, str]) -> tuple[list[Finding], dict[str, str]]:  # fmt: skip
    """Weights for one model (target or draft) on every node. Returns findings and node -> commit."""
    out: list[Finding] = []
    commits: dict[str, str] = {}
    rev = revision or "main"
    # Shipping needs a node that has the model; when none has it, the fix is a download.
    anywhere = any(resolve_revision(x, revision) for x in listings.values())
    for node, listing in listings.items():
        commit = resolve_revision(listing, revision)
        download = f"`HF_HOME={cache_dirs[node]} hf download {repo_id} --revision {rev}` on {node}"
        if commit is None:
            seen = (
                "no snapshot"
                if not listing.snapshots
                else f"snapshots {', '.join(c[:8] for c in listing.snapshots)}"
            )
            why = "not in the cache" if not listing.exists else f"revision {rev} not found ({seen})"
            out.append(Finding("Weights", ERROR, f"{role} {repo_id}@{rev}: {why} under {cache_dirs[node]}",
                               f"`sparkctl ship --weights --to {node}` (another node has it), or {download}"
                               if anywhere else f"no node has it, download it: {download}", node=node))
        elif listing.snapshots.get(commit, 0) == 0:
            out.append(Finding("Weights", ERROR, f"{role} {repo_id}@{rev}: snapshot {commit[:12]} is empty",
                               f"re-download or `sparkctl ship --weights --to {node}`", node=node))  # fmt: skip
        else:
            commits[node] = commit
            out.append(Finding("Weights", OK, f"{role} {repo_id}@{rev} -> {commit[:12]} "
                               f"({listing.snapshots[commit]} files)", node=node,
                               data={"role": role, "commit": commit}))  # fmt: skip
    if len(set(commits.values())) > 1:
        seen = ", ".join(f"{n}={c[:12]}" for n, c in sorted(commits.items()))
        out.append(Finding("Weights", ERROR, f"{role} {repo_id}@{rev} resolves to different commits: {seen}",
                           "pin model revision to a commit hash and ship that snapshot to every node"))  # fmt: skip
    return out, commits


def check_weights_content(
    role: str, repo_id: str, manifests: Mapping[str, Any], reference: str
) -> list[Finding]:
    """Weights, by content: every node's snapshot digest (sha256 per file, ship's manifest) equals the
    reference node's. A size-only check passes corrupted shards; this does not."""
    out: list[Finding] = []
    ref = manifests.get(reference)
    for node, m in manifests.items():
        if isinstance(m, BaseException):
            out.append(Finding("WeightsContent", ERROR, f"{role} {repo_id}: hashing the snapshot failed: "
                               f"{getattr(m, 'message', None) or m}", getattr(m, "fix", None), node=node))  # fmt: skip
        elif m.broken:
            out.append(Finding("WeightsContent", ERROR, f"{role} {repo_id}: {len(m.broken)} snapshot file(s) point at "
                               f"missing blobs (e.g. {m.broken[0]})", f"`sparkctl ship --weights --to {node}`",
                               node=node))  # fmt: skip
    if ref is None or isinstance(ref, BaseException) or not ref.present:
        return out
    for node, m in manifests.items():
        if node == reference or isinstance(m, BaseException) or not m.present:
            continue
        if m.digest == ref.digest:
            out.append(Finding("WeightsContent", OK, f"{role} {repo_id}: content identical to {reference} "
                               f"(sha256 {ref.digest[:12]}, {len(m.files)} files)", node=node))  # fmt: skip
            continue
        differ = sorted(rel for rel in ref.files.keys() | m.files.keys()
                        if (ref.files.get(rel) and ref.files[rel].sha256) != (m.files.get(rel) and m.files[rel].sha256))  # fmt: skip
        out.append(Finding("WeightsContent", ERROR, f"{role} {repo_id}: content differs from {reference} in "
                           f"{len(differ)} file(s): {', '.join(differ[:3])}{' ...' if len(differ) > 3 else ''}",
                           f"`sparkctl ship --weights --from {reference} --to {node}` replaces exactly those files",
                           node=node, data={"differ": differ}))  # fmt: skip
    return out


# ----------------------------------------------------------------------------- disk
def check_disk(node: str, needs: Mapping[str, tuple[int, DiskUsage]], margin: float = 1.1) -> list[Finding]:
    """DiskFree: what must be shipped (kind -> (bytes, filesystem)) vs free space, per filesystem."""
    by_mount: dict[str, tuple[int, DiskUsage, list[str]]] = {}
    for kind, (size, disk) in needs.items():
        total, _, kinds = by_mount.get(disk.mount, (0, disk, []))
        by_mount[disk.mount] = (total + size, disk, [*kinds, kind])
    out = []
    for mount, (size, disk, kinds) in by_mount.items():
        free = disk.avail_kib * 1024
        what = " + ".join(kinds)
        if size == 0:
            out.append(
                Finding(
                    "DiskFree",
                    OK,
                    f"{human_bytes(free)} free on {mount} ({what}: nothing to ship)",
                    node=node,
                )
            )
        elif size * margin > free:
            out.append(Finding("DiskFree", ERROR, f"{what} to ship need {human_bytes(size)}, only {human_bytes(free)} free on "
                               f"{mount} ({disk.path})", f"free space on {node}:{mount} (`docker system prune`, "
                               "old HF snapshots) or move the cache", node=node,
                               data={"need": size, "free": free}))  # fmt: skip
        else:
            out.append(Finding("DiskFree", OK, f"{what} to ship {human_bytes(size)}, {human_bytes(free)} free on {mount}",
                               node=node, data={"need": size, "free": free}))  # fmt: skip
    return out


# ----------------------------------------------------------------------------- ports, containers
def _plan_container(plan: Plan, node: str) -> tuple[str, str] | None:
    for spec in plan.ranks:
        if spec.node == node:
            return spec.container_name, plan.config_hash
    return None


def check_ports(node: str, ports: set[int], wanted: Mapping[int, str], containers: list[ContainerFacts] | None,
                plan: Plan) -> list[Finding]:  # fmt: skip
    """PortFree on rank 0: a port held by this very plan's running container is fine (up is a no-op)."""
    ours = _plan_container(plan, node)
    ours_running = bool(ours) and any(
        c.name == ours[0]
        and c.state == "running"
        and c.labels.get("sparkctl.config_hash") == plan.config_hash
        for c in containers or []
    )
    out = []
    for port, what in sorted(wanted.items()):
        if port not in ports:
            out.append(Finding("PortFree", OK, f"{what} port {port} free", node=node))
        elif ours_running:
            out.append(
                Finding(
                    "PortFree", OK, f"{what} port {port} held by this plan's running container", node=node
                )
            )
        else:
            out.append(Finding("PortFree", ERROR, f"{what} port {port} already in use on {node}",
                               f"find the owner with `sudo ss -ltnp 'sport = :{port}'` on {node} and stop it, "
                               "or change the port in the profile", node=node, data={"port": port}))  # fmt: skip
    return out


def check_stray(node: str, containers: list[ContainerFacts], plan: Plan, profile: Profile) -> list[Finding]:
    """StrayContainers: sparkctl-labelled or planned-name containers that are not this plan's."""
    planned = {s.container_name: s for s in plan.ranks if s.node == node}
    other_modes = {c.name for c in plan.stop_first}
    out = []
    for c in containers:
        labels = c.labels
        cluster = labels.get("sparkctl.cluster")
        state = f"{c.name} ({c.state}, {c.image})"
        if c.name in planned:
            if cluster != profile.cluster:
                out.append(Finding("StrayContainers", ERROR, f"{state} has a planned name but is not sparkctl's",
                                   f"rename or remove it: `docker rm -f {c.name}` on {node}", node=node))  # fmt: skip
            elif labels.get("sparkctl.config_hash") == plan.config_hash:
                out.append(Finding("StrayContainers", OK, f"{state} is this plan (up is a no-op)", node=node))
            else:
                out.append(Finding("StrayContainers", WARN, f"{state} runs an older config "
                                   f"({labels.get('sparkctl.config_hash', '?')} != {plan.config_hash})",
                                   "`sparkctl up` replaces it", node=node))  # fmt: skip
        elif cluster == profile.cluster:
            if c.name in other_modes or labels.get("sparkctl.mode") in profile.modes:
                sev = WARN if c.state == "running" else OK
                out.append(Finding("StrayContainers", sev, f"{state} of mode {labels.get('sparkctl.mode')}",
                                   "`sparkctl up` stops it first" if sev is WARN else None, node=node))  # fmt: skip
            else:
                out.append(Finding("StrayContainers", ERROR, f"{state} is labelled for this cluster but no mode "
                                   "plans it", f"`docker rm -f {c.name}` on {node}", node=node))  # fmt: skip
        elif cluster is not None and c.state == "running":
            out.append(Finding("StrayContainers", WARN, f"{state} belongs to sparkctl cluster {cluster}",
                               "it may hold GPUs and ports: `sparkctl down` with that cluster's profile", node=node))  # fmt: skip
    if not out:
        out.append(Finding("StrayContainers", OK, "no stray container", node=node))
    return out


# ----------------------------------------------------------------------------- unified memory
def mem_fraction(argv: list[str]) -> float | None:
    for i, word in enumerate(argv[:-1]):
        if word == "--mem-fraction-static":
            try:
                return float(argv[i + 1])
            except ValueError:
                return None
    return None


def check_unified_memory(node: str, meminfo: Mapping[str, int], weights_bytes: int | None,
                         frac: float | None, headroom: int = 4 * GIB) -> Finding:  # fmt: skip
    """UnifiedMemory: SGLang (0.5.23) sizes the pool from MemAvailable P: rest = P*frac - weights
    must leave room for KV; page cache counts as available to SGLang but can freeze a GB10."""
    avail = meminfo.get("MemAvailable", 0) * 1024
    free = meminfo.get("MemFree", meminfo.get("MemAvailable", 0)) * 1024
    total = meminfo.get("MemTotal", 0) * 1024
    data = {"mem_available": avail, "mem_free": free, "mem_total": total, "weights": weights_bytes}
    if weights_bytes is None:
        return Finding("UnifiedMemory", OK, f"MemAvailable {human_bytes(avail)} of {human_bytes(total)} (weights size unknown)",
                       node=node, data=data)  # fmt: skip
    need = int(weights_bytes / (frac or 0.9)) + headroom
    data["need"] = need
    basis = f"weights {human_bytes(weights_bytes)} / mem-fraction-static {frac or 0.9:g} + {human_bytes(headroom)} KV"
    if avail < need:
        return Finding("UnifiedMemory", ERROR, f"MemAvailable {human_bytes(avail)} < {human_bytes(need)} needed ({basis})",
                       "stop what holds memory (other containers, `docker ps`), then drop caches: "
                       "`sync; echo 3 | sudo tee /proc/sys/vm/drop_caches`", node=node, data=data)  # fmt: skip
    if free < need:
        return Finding("UnifiedMemory", WARN, f"MemFree {human_bytes(free)} < {human_bytes(need)} needed: "
                       f"{human_bytes(avail - free)} is page cache",
                       "drop caches before `up` (page cache on a GB10 can freeze the box during load): "
                       "`sync; echo 3 | sudo tee /proc/sys/vm/drop_caches`", node=node, data=data)  # fmt: skip
    return Finding(
        "UnifiedMemory",
        OK,
        f"MemAvailable {human_bytes(avail)} >= {human_bytes(need)} ({basis})",
        node=node,
        data=data,
    )
