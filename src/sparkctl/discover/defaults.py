"""What `init` proposes where a question has no answer yet. Pure.

The model, the draft and the image every node has; the HF cache each node keeps the model in;
the revision to pin (the commit refs/main names on every node).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sparkctl.discover.facts import HfCache, NodeDiscovery
from sparkctl.facts.hfcache import resolve_revision

DEFAULT_HF_CACHE = "~/.cache/huggingface"
_DRAFT_HINT = re.compile(r"dflash|draft|eagle", re.IGNORECASE)


@dataclass(frozen=True)
class Revision:
    value: str
    note: str = ""


def split_ref(text: str) -> tuple[str, str | None]:
    """'org/name@rev' -> ('org/name', 'rev')."""
    repo, _, rev = text.partition("@")
    return repo.strip(), (rev.strip() or None)


def default_model(nodes: list[NodeDiscovery]) -> str | None:
    """A model every node has (else rank 0's), not draft-looking."""
    common = set.intersection(*(n.models() for n in nodes)) if nodes else set()
    for pool in (common, nodes[0].models() if nodes else set()):
        targets = sorted(m for m in pool if not _DRAFT_HINT.search(m))
        if targets:
            return targets[0]
    return None


def default_draft(nodes: list[NodeDiscovery], model: str | None) -> str | None:
    """A DFlash-looking repo every node has (prefer one named like the target)."""
    common = set.intersection(*(n.models() for n in nodes)) if nodes else set()
    drafts = sorted(m for m in common if _DRAFT_HINT.search(m) and m != model)
    if model:
        stem = model.split("/")[-1].split("-")[0].lower()
        drafts.sort(key=lambda m: stem not in m.lower())
    return drafts[0] if drafts else None


def default_image(nodes: list[NodeDiscovery]) -> str | None:
    """A serving image every node has with the same id (else same ref, else rank 0's)."""
    if not nodes:
        return None
    first = {i.ref: i for i in nodes[0].images}
    same_id = [
        r for r, i in first.items() if all(any(x.ref == r and x.id == i.id for x in n.images) for n in nodes)
    ]
    same_ref = [r for r in first if all(any(x.ref == r for x in n.images) for n in nodes)]
    for pool in (same_id, same_ref, list(first)):
        if pool:
            return sorted(pool)[0]
    return None


def _cache_key(cache: HfCache) -> str:
    return DEFAULT_HF_CACHE if cache.source == "default" else cache.path


def _cache_with(node: NodeDiscovery, repo: str) -> HfCache | None:
    return next((c for c in node.caches if repo in c.models()), None)


def _cache_of(node: NodeDiscovery, key: str) -> HfCache | None:
    return next((c for c in node.caches if key in (c.path, _cache_key(c))), None)


def pin_revision(
    nodes: list[NodeDiscovery], repo: str, caches: dict[str, str], given: str | None
) -> Revision:
    """The given revision; else the commit refs/main names on every node; else main."""
    if given:
        return Revision(given)
    commits = set()
    for node in nodes:
        cache = _cache_of(node, caches[node.host])
        listing = cache.repos.get(repo) if cache else None
        commits.add(resolve_revision(listing, "main") if listing else None)
    if len(commits) == 1 and None not in commits:
        return Revision(commits.pop(), "refs/main on every node when init ran")  # type: ignore[arg-type]
    where = "not in every node's cache" if None in commits else "differs between nodes"
    return Revision("main", f"{where}: pin a commit so every node serves the same bytes")


def hf_caches(nodes: list[NodeDiscovery], model: str, given: str | None) -> tuple[str, dict[str, str]]:
    """`given` (--hf-cache), else where rank 0 has the model; per node, where it lives elsewhere."""
    if given:
        hf_cache = given
    else:
        c0 = _cache_with(nodes[0], model)
        hf_cache = _cache_key(c0) if c0 else DEFAULT_HF_CACHE
    per_node_cache: dict[str, str] = {}
    for n in nodes:
        key = hf_cache
        if not given:
            here = _cache_of(n, hf_cache)
            if here is None or model not in here.models():
                other = _cache_with(n, model)
                key = _cache_key(other) if other else hf_cache
        per_node_cache[n.host] = key
    return hf_cache, per_node_cache
