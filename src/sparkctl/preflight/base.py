"""What a preflight check is: one `Check` subclass (kubeadm's Checker), and what it is handed.

A check names itself, says when it applies, asks for facts (`probes`: named argv run in the
node's one batch, or `Task`s that talk to the node's connector, e.g. the Docker API) and judges
the gathered facts purely. The runner (runner.py) is a generic loop over the registered checks
(registry.py): adding a check is one module under preflight/checks/ plus its test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from sparkctl.findings import Finding, Severity

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector
    from sparkctl.connectors.pool import NodePool
    from sparkctl.facts.probe import Probe
    from sparkctl.planning.build import Plan
    from sparkctl.profile.schema import ModelRef, Profile

OK, WARN, ERROR, SKIP = Severity.OK, Severity.WARN, Severity.ERROR, Severity.SKIP


@dataclass(frozen=True)
class Task:
    """A fact read through the node's connector (not a shell command), run beside the batch.

    `after` names another task of the same node that must succeed first (its value is in the
    mapping `run` receives); when that one fails, this one is not run and only it is reported."""

    run: Callable[[Connector, Mapping[str, Any]], Any]
    after: str | None = None


@dataclass
class NodeFacts:
    """What was gathered on one node: fact name -> value, or fact name -> why it failed."""

    node: str
    conn: Connector | None = None
    connect_error: BaseException | None = None
    values: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, BaseException] = field(default_factory=dict)

    def get(self, name: str) -> Any:
        return self.values.get(name)

    def result(self, name: str) -> Any:
        """The value, or the exception, or None when nobody asked for it."""
        return self.errors.get(name, self.values.get(name))

    def with_prefix(self, prefix: str) -> dict[str, Any]:
        """{suffix: value | exception} of every fact named `<prefix>:<suffix>`, sorted by name."""
        got = {**self.values, **self.errors}
        return {k.partition(":")[2]: got[k] for k in sorted(got) if k.startswith(prefix + ":")}


@dataclass(frozen=True)
class Ctx:
    """One run's inputs, shared by every check (read-only)."""

    profile: Profile
    plan: Plan
    selected: frozenset[str]
    sysfs_root: str
    checks: Mapping[str, Check]
    pool: NodePool | None = None  # for checks that run something of their own (Launch: the image's parser)
    deep: bool = False  # WeightsContent rehashes every byte instead of the quick check

    @property
    def multi(self) -> bool:
        return self.plan.nnodes > 1

    @property
    def rank0(self) -> str:
        return self.plan.nodes[0]

    @property
    def nodes(self) -> list[str]:
        """Nodes holding a rank, each once (several replicas may share a node)."""
        return list(dict.fromkeys(self.plan.nodes))

    @property
    def router_only(self) -> str | None:
        """The router's node when it holds no rank: only `Check.router_node` checks run there."""
        router = self.plan.router
        return router.node if router is not None and router.node not in self.nodes else None

    def covers(self, check: Check, node: str) -> bool:
        return node != self.router_only or check.router_node

    def applies(self, name: str) -> bool:
        check = self.checks.get(name)
        return check is not None and check.selected(self) and check.applies(self)

    def any(self, *names: str) -> bool:
        return any(self.applies(n) for n in names)

    @property
    def gpus_requested(self) -> bool:
        return self.profile.engine.container.gpus

    def model_refs(self) -> list[tuple[str, ModelRef]]:
        m = self.profile.model
        return [("target", m.target), *([("draft", m.draft)] if m.draft is not None else [])]

    def hf_cache(self, node: str) -> str:
        from sparkctl.profile.derived import hf_cache_for

        return hf_cache_for(self.profile, node)

    def repo_dir(self, node: str, repo_id: str) -> str:
        from sparkctl.facts.hfcache import repo_dir

        return repo_dir(self.hf_cache(node), repo_id)

    def failed(self, out: list[Finding], fact: str, check: str, f: NodeFacts) -> bool:
        """True (and one finding appended) when `fact` could not be gathered on f's node.

        An unreachable Docker engine is DockerEngine's error; the checks that needed it SKIP."""
        if fact not in f.errors:
            return False
        if fact == "docker" and check != "DockerEngine" and self.applies("DockerEngine"):
            out.append(Finding(check, SKIP, "skipped: Docker engine not reachable", node=f.node))
        else:
            out.append(probe_failure(check, f.node, f.errors[fact]))
        return True


def probe_failure(check: str, node: str, exc: BaseException) -> Finding:
    msg = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
    return Finding(check, ERROR, f"probe failed: {msg}", getattr(exc, "fix", None), node=node)


class Check:
    """One preflight check. Subclasses set the class attributes and override what they need.

    `order` places it in reports and docs; `fast` puts it in the subset `up` runs first;
    `multi_node` checks apply only to modes with several nodes; `aliases` are finding names it
    emits besides its own (covered by --only/--ignore of the check)."""

    name: ClassVar[str]
    summary: ClassVar[str]  # one line: what it checks (docs/preflight.md says what it prevents)
    order: ClassVar[int]
    fast: ClassVar[bool] = False
    multi_node: ClassVar[bool] = False
    aliases: ClassVar[tuple[str, ...]] = ()
    skip_when_unreachable: ClassVar[bool] = True  # SKIP finding for a node that cannot be reached
    router_node: ClassVar[bool] = False  # also runs on the router's node when it holds no rank

    def selected(self, ctx: Ctx) -> bool:
        """Chosen by --only (default: all)."""
        return self.name in ctx.selected

    def applies(self, ctx: Ctx) -> bool:
        """Meaningful for this profile and mode."""
        return ctx.multi or not self.multi_node

    def skips_node(self, ctx: Ctx, node: str) -> bool:
        """Whether an unreachable `node` gets a SKIP finding from this check."""
        return self.skip_when_unreachable

    def probes(self, ctx: Ctx, node: str) -> Mapping[str, Probe | Task]:
        """The facts this check needs from `node` (same name = same fact, gathered once)."""
        return {}

    def followups(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> dict[str, dict[str, Probe]]:
        """Facts that depend on every node's first facts: {node: {name: probe}} (a second batch)."""
        return {}

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        """Facts of the reachable nodes (rank order) -> findings. Pure: no I/O here."""
        raise NotImplementedError
