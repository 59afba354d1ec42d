"""WeightsOffline: each node's snapshot opened the way the engine opens it offline.

The engine (huggingface_hub with HF_HUB_OFFLINE=1) resolves the profile's revision
itself, on the node: a full commit names `snapshots/<commit>`; anything else is read from
`refs/<revision>` exactly as stored (huggingface_hub does not strip it: a ref ending in a newline
names no snapshot), then it opens the files of that snapshot through their links and reads
`config.json` unless `.no_exist/<commit>/config.json` says the Hub has none. The Weights check
judges a listing (refs read by the shell, entries counted); this one runs that open on the node,
so a cache that a start by hand (the engine's CLI naming only `<id>`) could not open fails here with the node named.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from sparkctl.facts.probe import Probe, ProbeError, checked_stdout
from sparkctl.findings import Finding
from sparkctl.preflight.base import ERROR, OK, Check, Ctx, NodeFacts, probe_failure

# Runs on the node (python3, stdlib): argv[1] the repo dir, argv[2] the revision. Mirrors
# huggingface_hub's offline path (snapshot_download(local_files_only=True), try_to_load_from_cache).
OPEN_SCRIPT = r"""import json, os, re, sys
repo, rev = sys.argv[1], sys.argv[2]
out = {"repo": os.path.isdir(repo), "how": None, "commit": None, "snapshot": False,
       "files": 0, "unreadable": [], "config": False, "no_exist": []}
if out["repo"]:
    if re.match(r"^[0-9a-f]{40}$", rev):
        out["how"], out["commit"] = "commit", rev
    elif os.path.isfile(os.path.join(repo, "refs", rev)):
        with open(os.path.join(repo, "refs", rev)) as fh:
            out["how"], out["commit"] = "ref", fh.read()
c = out["commit"]
snaps = os.path.join(repo, "snapshots")
if c is not None and os.path.isdir(snaps) and c in os.listdir(snaps):
    snap = os.path.join(snaps, c)
    out["snapshot"] = os.path.isdir(snap)
    for root, dirs, files in os.walk(snap):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            out["files"] += 1
            if not os.path.isfile(path) or not os.access(path, os.R_OK):
                out["unreadable"].append(os.path.relpath(path, snap))
    for name in ("config.json", "params.json"):
        out["config"] = out["config"] or os.path.isfile(os.path.join(snap, name))
        if os.path.isfile(os.path.join(repo, ".no_exist", c, name)):
            out["no_exist"].append(name)
print(json.dumps(out))
"""


@dataclass(frozen=True)
class OfflineOpen:
    """What the engine's offline open of `<repo>@<revision>` finds on one node."""

    repo: bool
    how: str | None  # "commit" (a full hash) | "ref" (refs/<revision>) | None: neither
    commit: str | None  # as read: a ref's bytes, unstripped
    snapshot: bool  # snapshots/<commit> is there
    files: int = 0
    unreadable: list[str] = field(default_factory=list)  # entries that do not open (dangling link...)
    config: bool = False  # config.json (or a Mistral-format params.json) opens
    no_exist: list[str] = field(default_factory=list)  # .no_exist/<commit>/<name>: "the Hub has none"


def parse_open(text: str) -> OfflineOpen:
    try:
        doc = json.loads(text.strip().splitlines()[-1])
        return OfflineOpen(**doc)
    except (ValueError, IndexError, TypeError) as exc:
        raise ProbeError(f"the offline open printed no result ({exc})") from None


def open_probe(repo_dir: str, revision: str) -> Probe:
    what = f"opening {repo_dir}@{revision} as the engine does offline"
    return Probe(
        ("python3", "-S", "-c", OPEN_SCRIPT, repo_dir, revision),
        lambda res: parse_open(checked_stdout(res, what)),
    )


def check_offline(role: str, repo_id: str, rev: str, node: str, got: OfflineOpen, repo: str) -> list[Finding]:
    """One node's offline open of one model. Silent where the Weights check already speaks (no repo,
    the revision in no ref and not a full commit, the snapshot absent)."""
    where = f"{role} {repo_id}@{rev}"
    ship = f"`sparkctl ship --weights --to {node}`"
    if not got.repo or got.how is None:
        return []
    c = got.commit or ""
    if not got.snapshot:
        if got.how == "ref" and c.strip() != c:
            return [
                _error(
                    node,
                    f"{where}: refs/{rev} holds {c.strip()[:12]} with whitespace around it; offline the engine "
                    "reads the ref as is and finds no such snapshot",
                    f"on {node}: `printf %s {c.strip()} > {repo}/refs/{rev}` (or {ship})",
                )
            ]
        return []
    out: list[Finding] = []
    if got.unreadable:
        out.append(
            _error(
                node,
                f"{where}: {len(got.unreadable)} of {got.files} file(s) of snapshot {c[:12]} do not open "
                f"(e.g. {got.unreadable[0]}: a link to a missing blob, or not readable); the engine fails loading them",
                f"{ship} (another node has it), or re-download it there",
            )
        )
    if got.no_exist:
        name = got.no_exist[0]
        out.append(
            _error(
                node,
                f"{where}: .no_exist/{c[:12]}/{name} marks {name} as absent from the Hub; offline the engine "
                "then does not read it",
                f"on {node}: `rm {repo}/.no_exist/{c}/{name}`",
            )
        )
    elif not got.config:
        out.append(
            _error(
                node,
                f"{where}: snapshot {c[:12]} has no config.json; the engine reads it first",
                f"{ship} (another node has it), or re-download it there",
            )
        )
    if not out:
        via = f"refs/{rev} -> {c[:12]}" if got.how == "ref" else f"snapshots/{c[:12]}"
        out.append(
            Finding("WeightsOffline", OK, f"{where}: opens offline ({via}, {got.files} files)", node=node)
        )
    return out


def _error(node: str, message: str, fix: str) -> Finding:
    return Finding("WeightsOffline", ERROR, message, fix, node=node)


def offline_findings(ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
    out: list[Finding] = []
    for role, ref in ctx.model_refs():
        rev = ref.revision or "main"
        for node, f in facts.items():
            key = f"offline:{ref.id}"
            if key in f.errors:
                out.append(probe_failure("WeightsOffline", node, f.errors[key]))
            elif f.get(key) is not None:
                out += check_offline(role, ref.id, rev, node, f.get(key), ctx.repo_dir(node, ref.id))
    return out


class WeightsOffline(Check):
    name = "WeightsOffline"
    summary = "each node's snapshot opens as the engine opens it offline (refs/<branch> or the commit)"
    order = 115
    fast = True

    def probes(self, ctx: Ctx, node: str) -> dict[str, Probe]:
        return {
            f"offline:{ref.id}": open_probe(ctx.repo_dir(node, ref.id), ref.revision or "main")
            for _, ref in ctx.model_refs()
        }

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        return offline_findings(ctx, facts)
