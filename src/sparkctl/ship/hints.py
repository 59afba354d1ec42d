"""What the last `ship` saw, kept on the machine running sparkctl: the image ID each source node had
for a ref. The next `state` round trip sends it as `want`: a node whose ref is that image answers
after one engine query (no other image, history or free space read), which is all a re-ship of
nothing new needs. Only a hint: a stale one (the image was rebuilt) costs a second round trip to
the nodes that answered short, and only when something is then sent anyway.

Keyed by what can change: the cluster, the node and the ref. One JSON file under
$XDG_CACHE_HOME/sparkctl (else ~/.cache/sparkctl), written whole and renamed; unreadable = empty.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def hints_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sparkctl" / "ship-hints.json"


def _load() -> dict:
    try:
        doc = json.loads(hints_path().read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _key(cluster: str, node: str, ref: str) -> str:
    return f"{cluster}\0{node}\0{ref}"


def image_hint(cluster: str, nodes: list[str], ref: str) -> str | None:
    """The ID last seen for `ref` on the first of `nodes` (source candidates, in preference order)
    that has one."""
    doc = _load()
    for node in nodes:
        got = doc.get(_key(cluster, node, ref))
        if isinstance(got, str) and got.startswith("sha256:"):
            return got
    return None


def remember_image(cluster: str, node: str, ref: str, image_id: str) -> None:
    """Best effort: a cache that cannot be written only means a slower next re-ship."""
    doc = _load()
    key = _key(cluster, node, ref)
    if doc.get(key) == image_id:
        return
    doc[key] = image_id
    path = hints_path()
    tmp = path.with_name(f"{path.name}.{os.getpid()}.part")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(doc))
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)
