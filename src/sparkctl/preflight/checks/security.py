"""Security: API exposure, privileges, remote code, pinned revisions, secret file modes.

Pure judgements over the profile and plan, plus one `stat` probe per node for the secret files
(docs/security.md lists every default these enforce). In `up`'s quick subset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from sparkctl.facts.probe import Probe
from sparkctl.findings import Finding, Severity
from sparkctl.planning.hardening import binds_everywhere, broad_rdma_dir, is_pinned, keyless_binds
from sparkctl.preflight.base import Check, Ctx, NodeFacts

if TYPE_CHECKING:
    from sparkctl.planning.build import Plan
    from sparkctl.profile.schema import Profile

GROUP = "Security"
NAMES = ("ApiExposure", "Privileged", "RemoteCode", "UnpinnedRevision", "SecretFileMode", "SecretEnvSet")
STAT_SCRIPT = 'for f; do [ -e "$f" ] && stat -c "%a %n" -- "$f" || echo "missing $f"; done; exit 0'


def check_api_exposure(profile: Profile) -> Finding:
    eng = profile.engine
    exposed = keyless_binds(profile)
    if exposed and not binds_everywhere(profile):
        # An engine without a key serves every route to whoever reaches the port: generation, its
        # admin-optional routes (weight reloads, adapters...) and its settings.
        if eng.expose == "public":
            return Finding(
                "ApiExposure",
                Severity.WARN,
                f"the API listens on {', '.join(exposed)} without a key (expose: public)",
            )
        return Finding(
            "ApiExposure",
            Severity.ERROR,
            f"the API has no key and listens on {', '.join(exposed)} (not loopback): anyone reaching it "
            "may use the model and its admin routes",
            fix="set engine.api_key: {env: NAME} or {file: PATH}, or say engine.expose: public",
        )
    if binds_everywhere(profile) and eng.api_key is None:
        if eng.expose == "public":
            return Finding(
                "ApiExposure", Severity.WARN, f"the API listens on {eng.host} without a key (expose: public)"
            )
        return Finding(
            "ApiExposure",
            Severity.ERROR,
            f"engine.host {eng.host or '(empty)'} binds every interface and the API has no key",
            fix="set engine.api_key: {env: NAME} or {file: PATH}, bind one address (engine.host), "
            "or say engine.expose: public",
        )
    where = eng.host or "each node's own address"
    return Finding("ApiExposure", Severity.OK, f"API on {where}" + (", key required" if eng.api_key else ""))


def check_privileged(profile: Profile) -> Finding | None:
    if not profile.engine.container.privileged:
        return None
    return Finding(
        "Privileged",
        Severity.WARN,
        "engine.container.privileged: true gives the containers every device and capability",
        fix="remove it: the rdma preset (engine.container.preset) grants what NCCL over RoCE needs",
    )


def check_rdma_dir(profile: Profile) -> Finding | None:
    """The rdma preset passes every character device it finds there: /dev would be all of them."""
    where = broad_rdma_dir(profile)
    if where is None:
        return None
    return Finding(
        "Privileged",
        Severity.WARN,
        f"engine.container.rdma_devices_dir {where} passes every character device in it to the containers",
        fix="set it to the RDMA device directory (/dev/infiniband, the default)",
    )


def check_remote_code(profile: Profile) -> list[Finding]:
    out: list[Finding] = []
    refs = [("model.target", profile.model.target), ("model.draft", profile.model.draft)]
    for what, ref in refs:
        if ref is not None and not is_pinned(ref.revision):
            out.append(
                Finding(
                    "UnpinnedRevision",
                    Severity.WARN,
                    f"{what} {ref.id} revision {ref.revision or 'main'} is a branch, not a commit",
                    fix=f"pin {what}.revision to the commit you reviewed (ship copies that; up serves it offline)",
                )
            )
    if profile.engine.trust_remote_code:
        out.append(
            Finding(
                "RemoteCode",
                Severity.WARN,
                "engine.trust_remote_code: the model repo's Python runs in the container",
            )
        )
    return out


def parse_modes(node: str, stdout: str) -> list[Finding]:
    """`stat -c '%a %n'` lines -> one finding per secret file that is missing or not 0400/0600-free."""
    out: list[Finding] = []
    for line in stdout.splitlines():
        mode, _, path = line.partition(" ")
        if mode == "missing":
            out.append(
                Finding(
                    "SecretFileMode",
                    Severity.ERROR,
                    f"secret file {path} is missing",
                    node=node,
                    fix=f"create it on {node} with mode 0400 (install -m 0400 ... {path})",
                )
            )
        elif mode.isdigit() and int(mode, 8) & 0o077:
            out.append(
                Finding(
                    "SecretFileMode",
                    Severity.ERROR,
                    f"secret file {path} has mode {mode}: others can read it",
                    node=node,
                    fix=f"chmod 0400 {path}  (on {node})",
                )
            )
    return out


def secret_files(plan: Plan) -> dict[str, list[str]]:
    """Every `file:` secret (HF token, API keys) of the plan, by the node that must hold it."""
    wanted: dict[str, set[str]] = {}
    for spec in [*plan.ranks, *([plan.router] if plan.router else [])]:
        refs = spec.secret_refs() + (
            [plan.endpoint.api_key] if plan.endpoint.api_key and spec.rank == 0 else []
        )
        refs += [k.ref for k in spec.gateway.named] if spec.gateway else []  # engine.api_keys
        for ref in refs:
            if ref.file and ref.node == spec.node:
                wanted.setdefault(spec.node, set()).add(ref.file)
    return {n: sorted(paths) for n, paths in wanted.items()}


def secret_envs(plan: Plan) -> dict[str, str]:
    """Every `env:` secret source of the plan (ranks, endpoint, router): variable -> secret name."""
    refs = [r for spec in plan.ranks for r in spec.secret_refs()]
    refs += [plan.endpoint.api_key] if plan.endpoint.api_key else []
    refs += plan.router.secret_refs() if plan.router else []
    refs += [k.ref for s in [*plan.ranks, plan.router] if s and s.gateway for k in s.gateway.named]
    return {r.env: r.name for r in refs if r.env}


def check_secret_envs(plan: Plan) -> list[Finding]:
    """An `env:` secret whose variable is unset in this shell fails at `up`: say so now."""
    import os

    out = []
    for var, name in secret_envs(plan).items():
        if os.environ.get(var):
            out.append(Finding("SecretEnvSet", Severity.OK, f"secret {name}: ${var} is set"))
            continue
        out.append(
            Finding(
                "SecretEnvSet",
                Severity.ERROR,
                f"secret {name} comes from ${var}, which is not set in this shell (`up` would fail)",
                fix=f"export {var}='...' in the shell that runs sparkctl (or use file: in the profile)",
            )
        )
    return out


def secret_modes(node: str, paths: list[str], res: object) -> list[Finding]:
    """The `stat` probe's result (or its failure) -> findings for one node."""
    if isinstance(res, Exception) or res is None:
        return [Finding("SecretFileMode", Severity.ERROR, f"cannot check the secret files: {res}", node=node)]
    found = parse_modes(node, res.stdout)  # type: ignore[attr-defined]
    return found or [Finding("SecretFileMode", Severity.OK, f"{len(paths)} secret file(s) 0400", node=node)]


class Security(Check):
    name = GROUP
    summary = "no keyless API on every interface, no --privileged, pinned revisions, secret files 0400"
    order = 190
    fast = True
    aliases = NAMES
    skip_when_unreachable = False  # mostly judged on the profile; unreachable nodes get no stat

    def selected(self, ctx: Ctx) -> bool:
        return self.name in ctx.selected or bool(ctx.selected & set(NAMES))

    def probes(self, ctx: Ctx, node: str) -> dict[str, Probe]:
        paths = secret_files(ctx.plan).get(node)
        if not paths:
            return {}
        return {"secretmodes": Probe(("sh", "-c", STAT_SCRIPT, "sparkctl-stat", *paths), lambda r: r)}

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        profile = ctx.profile
        out = [check_api_exposure(profile), *check_remote_code(profile), *check_secret_envs(ctx.plan)]
        out += [f for f in (check_privileged(profile), check_rdma_dir(profile)) if f is not None]
        for node, paths in secret_files(ctx.plan).items():
            if node in facts:
                out += secret_modes(node, paths, facts[node].result("secretmodes"))
        everything = self.name in ctx.selected
        return [
            Finding(f.check, f.severity, f.message, f.fix, f.node, f.rank, {**f.data, "group": GROUP})
            for f in out
            if everything or f.check in ctx.selected
        ]
