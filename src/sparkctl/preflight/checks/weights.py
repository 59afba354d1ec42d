"""Weights and WeightsContent: the target (and draft) snapshots on every node, same commit, same bytes.

Also the weights facts other checks use: the snapshot listings, the commit each node resolves,
and snapshot sizes (`du`, measured only where a check asks for them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from sparkctl.facts.disk import du_probe
from sparkctl.facts.hfcache import RepoListing, repo_probe, resolve_revision
from sparkctl.facts.probe import Probe
from sparkctl.findings import Finding
from sparkctl.preflight.base import ERROR, OK, WARN, Check, Ctx, NodeFacts, Task, probe_failure


def repo_probes(ctx: Ctx, node: str) -> dict[str, Probe]:
    return {f"repo:{ref.id}": repo_probe(ctx.repo_dir(node, ref.id)) for _, ref in ctx.model_refs()}


def node_commits(facts: Mapping[str, NodeFacts], repo_id: str, rev: str | None) -> dict[str, str | None]:
    """node -> the commit `rev` resolves to in its listing (None: not there), for nodes that listed."""
    listings = {n: f.get(f"repo:{repo_id}") for n, f in facts.items()}
    return {n: resolve_revision(listing, rev) for n, listing in listings.items() if listing is not None}


def du_followup(ctx: Ctx, node: str, repo_id: str, commit: str) -> dict[str, Probe]:
    return {f"du:{repo_id}": du_probe(f"{ctx.repo_dir(node, repo_id)}/snapshots/{commit}")}


def snapshot_sizes(facts: Mapping[str, NodeFacts]) -> dict[tuple[str, str], int]:
    """(node, repo id) -> bytes, for the snapshots that were measured."""
    return {
        (n, repo): v
        for n, f in facts.items()
        for repo, v in f.with_prefix("du").items()
        if isinstance(v, int)
    }


def model_size(sizes: Mapping[tuple[str, str], int], repo_id: str) -> int | None:
    return next((v for (_, r), v in sizes.items() if r == repo_id), None)


def weights_findings(
    ctx: Ctx, facts: Mapping[str, NodeFacts]
) -> tuple[list[Finding], dict[str, dict[str, str]]]:
    """Weights' findings, and repo id -> {node: commit} of the nodes that have a usable snapshot."""
    out: list[Finding] = []
    commits: dict[str, dict[str, str]] = {}
    for role, ref in ctx.model_refs():
        listings: dict[str, RepoListing] = {}
        for n, f in facts.items():
            key = f"repo:{ref.id}"
            if key in f.errors:
                out.append(probe_failure("Weights", n, f.errors[key]))
            elif f.get(key) is not None:
                listings[n] = f.get(key)
        caches = {n: ctx.hf_cache(n) for n in listings}
        found, commits[ref.id] = check_weights(role, ref.id, ref.revision, listings, caches)
        out += found
    return out, commits


class Weights(Check):
    name = "Weights"
    summary = "target and draft snapshots are present on every node, same revision"
    order = 110
    fast = True

    def probes(self, ctx: Ctx, node: str) -> dict[str, Probe]:
        return repo_probes(ctx, node)

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        return weights_findings(ctx, facts)[0]


class WeightsContent(Check):
    name = "WeightsContent"
    summary = "every snapshot file has the same sha256 as on rank 0 (hashes cached on the nodes)"
    order = 120

    def probes(self, ctx: Ctx, node: str) -> dict[str, Probe | Task]:
        from sparkctl.remote.manifest import snapshot_manifest

        out: dict[str, Probe | Task] = {**repo_probes(ctx, node)}
        if ctx.multi:  # hashed on the node (cached there), beside the node's other probes
            cache = ctx.hf_cache(node)
            for _, ref in ctx.model_refs():
                out[f"manifest:{ref.id}"] = Task(
                    lambda conn, _, ref=ref: snapshot_manifest(conn, cache, ref, deep=ctx.deep)
                )
        return out

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        """Compare the manifests where every node has the same commit (else Weights says what is wrong)."""
        if not ctx.multi:
            return []
        out: list[Finding] = []
        for role, ref in ctx.model_refs():
            commits = node_commits(facts, ref.id, ref.revision)
            if ctx.rank0 not in commits or None in commits.values() or len(set(commits.values())) != 1:
                continue
            manifests = {n: facts[n].result(f"manifest:{ref.id}") for n in commits}
            manifests = {n: m for n, m in manifests.items() if m is not None}
            out += check_weights_content(role, ref.id, manifests, ctx.rank0)
        # Say how content was compared: the cached hashes are rsync's quick check (size+mtime+inode).
        how = "every byte rehashed" if ctx.deep else "quick check: size+mtime+inode, --deep rehashes"
        return [
            dataclasses.replace(f, message=f"{f.message[:-1]}; {how})")
            if f.severity == OK and f.message.endswith(")")
            else f
            for f in out
        ]


def check_weights(
    role: str,
    repo_id: str,
    revision: str | None,
    listings: Mapping[str, RepoListing],
    cache_dirs: Mapping[str, str],
) -> tuple[list[Finding], dict[str, str]]:
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
            out.append(
                Finding(
                    "Weights",
                    ERROR,
                    f"{role} {repo_id}@{rev}: {why} under {cache_dirs[node]}",
                    f"`sparkctl ship --weights --to {node}` (another node has it), or {download}"
                    if anywhere
                    else f"no node has it, download it: {download}",
                    node=node,
                )
            )
        elif listing.snapshots.get(commit, 0) == 0:
            out.append(
                Finding(
                    "Weights",
                    ERROR,
                    f"{role} {repo_id}@{rev}: snapshot {commit[:12]} is empty",
                    f"re-download or `sparkctl ship --weights --to {node}`",
                    node=node,
                )
            )
        else:
            commits[node] = commit
            out.append(
                Finding(
                    "Weights",
                    OK,
                    f"{role} {repo_id}@{rev} -> {commit[:12]} ({listing.snapshots[commit]} files)",
                    node=node,
                    data={"role": role, "commit": commit},
                )
            )
    out += offline_findings(role, repo_id, rev, listings, commits)
    if len(set(commits.values())) > 1:
        seen = ", ".join(f"{n}={c[:12]}" for n, c in sorted(commits.items()))
        out.append(
            Finding(
                "Weights",
                ERROR,
                f"{role} {repo_id}@{rev} resolves to different commits: {seen}",
                "pin model revision to a commit hash and ship that snapshot to every node",
            )
        )
    return out, commits


def check_weights_content(
    role: str, repo_id: str, manifests: Mapping[str, Any], reference: str
) -> list[Finding]:
    """Weights, by content: every node's snapshot digest (sha256 per file, ship's manifest) equals the
    reference node's. A size-only check passes corrupted shards; this does not."""
    out: list[Finding] = []
    ref = manifests.get(reference)
    for node, m in manifests.items():
        if isinstance(m, Exception):
            out.append(
                Finding(
                    "WeightsContent",
                    ERROR,
                    f"{role} {repo_id}: hashing the snapshot failed: {getattr(m, 'message', None) or m}",
                    getattr(m, "fix", None),
                    node=node,
                )
            )
        elif m.broken:
            out.append(
                Finding(
                    "WeightsContent",
                    ERROR,
                    f"{role} {repo_id}: {len(m.broken)} snapshot file(s) point at "
                    f"missing blobs (e.g. {m.broken[0]})",
                    f"`sparkctl ship --weights --to {node}`",
                    node=node,
                )
            )
    if ref is None or isinstance(ref, Exception) or not ref.present:
        return out
    for node, m in manifests.items():
        if node == reference or isinstance(m, Exception) or not m.present:
            continue
        if m.digest == ref.digest:
            out.append(
                Finding(
                    "WeightsContent",
                    OK,
                    f"{role} {repo_id}: content identical to {reference} "
                    f"(sha256 {ref.digest[:12]}, {len(m.files)} files)",
                    node=node,
                )
            )
            continue
        differ = sorted(
            rel
            for rel in ref.files.keys() | m.files.keys()
            if (ref.files.get(rel) and ref.files[rel].sha256) != (m.files.get(rel) and m.files[rel].sha256)
        )
        out.append(
            Finding(
                "WeightsContent",
                ERROR,
                f"{role} {repo_id}: content differs from {reference} in "
                f"{len(differ)} file(s): {', '.join(differ[:3])}{' ...' if len(differ) > 3 else ''}",
                f"`sparkctl ship --weights --from {reference} --to {node}` replaces exactly those files",
                node=node,
                data={"differ": differ},
            )
        )
    return out


def offline_findings(
    role: str, repo_id: str, rev: str, listings: Mapping[str, RepoListing], commits: Mapping[str, str]
) -> list[Finding]:
    """The cache as the engine opens it offline (huggingface_hub with HF_HUB_OFFLINE: a full commit's
    snapshot, or refs/<rev>; never a short prefix), and the refs to the commit other nodes have (a
    start by hand names the model without a revision: refs/main)."""
    out: list[Finding] = []
    for node, commit in commits.items():
        listing = listings[node]
        if rev != commit and listing.refs.get(rev) != commit:
            out.append(
                Finding(
                    "Weights",
                    ERROR,
                    f"{role} {repo_id}@{rev}: only a prefix of {commit[:12]} matches; offline the engine "
                    f"opens a full commit or refs/{rev}, not a prefix",
                    f"set the revision to the full commit {commit}",
                    node=node,
                )
            )
        elsewhere = {r for n, x in listings.items() if n != node for r, c in x.refs.items() if c == commit}
        missing = sorted(r for r in elsewhere if listing.refs.get(r) != commit)
        if missing:
            out.append(
                Finding(
                    "Weights",
                    WARN,
                    f"{role} {repo_id}: no refs/{', refs/'.join(missing)} to {commit[:12]} here (another node "
                    f"has it): a start by hand of `{repo_id}` without that revision fails offline",
                    f"`sparkctl ship --weights --to {node}` (adds the source's refs)",
                    node=node,
                )
            )
    return out
