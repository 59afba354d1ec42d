"""The floors and nevers of docs/architecture.md, checked on every import in src/ (function-level,
lazy and `if TYPE_CHECKING:` imports included: a typing-only import is an arrow too).

Each rule is a pure function of the import list, so a test can hand it a deliberately wrong import
and see it reported (test_the_rules_catch_an_engines_to_planning_import).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path
from typing import NamedTuple

SRC = Path(__file__).resolve().parents[2] / "src" / "sparkctl"

# Bottom to top. A unit is a package or top-level module under sparkctl; it may import its own
# floor's units and the floors below, never a floor above.
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("errors", "findings", "fanout", "units", "yaml_compose", "yaml_model", "cluster_http")),
    ("profile", ("profile",)),
    (
        "reach: connectors, facts, node program, secrets",
        ("connectors", "facts", "node", "secrets"),
    ),
    ("engines", ("engines",)),
    ("planning", ("planning",)),
    ("runtime", ("runtime",)),
    # shared services: HTTP clients of engines and router (the OpenAI client, its timed streams);
    # the controller's side of the node programs (run an op, the weights manifest and its diff)
    ("services", ("clients", "remote")),
    (
        "flows",
        (
            "lifecycle",
            "preflight",
            "ship",
            "verify",
            "benchmark",
            "gpu",
            "recipes",
            "top",
            "discover",
            "export",
        ),
    ),
    ("cli", ("commands", "cli", "__main__")),
]
FLOOR = {f"sparkctl.{u}": i for i, (_name, units) in enumerate(FLOORS) for u in units}

# Imports allowed to run from a lower floor to a higher one ("at most one"): none today.
UPWARD_ALLOWED: set[tuple[str, str]] = set()

# A flow reaches another flow only through these modules (its public entry points): only an
# orchestration that truly runs another flow. Shared services (clients/, remote/) sit below the flows.
ENTRY_POINTS: dict[str, tuple[str, ...]] = {
    "sparkctl.preflight": ("sparkctl.preflight",),  # `up` runs run_preflight (FAST_CHECKS)
    "sparkctl.ship": ("sparkctl.ship",),  # `up --ship` calls ship (its Progress type with it)
    "sparkctl.lifecycle": ("sparkctl.lifecycle.up",),  # bench --compare switches modes with up
}
MAX_ENTRY_POINTS = 5
MAX_FLOW_DEPTH = 3  # flows stacked on flows: bench -> up -> preflight
MAX_CIRCLES_INSIDE = 4  # circles of files inside one package (docs/architecture.md lists them)
# Circles over the limit in rooms another helper is editing (the integrator empties this): ship's
# package face and run.py import each other lazily (run needs ShipReport, default_streams, raise_first).
KNOWN_CIRCLES: list[list[str]] = []

# An underscore module is its package's own; these are also shared with their floor (the CLI's).
SHARED_PRIVATE_MODULES: dict[str, tuple[str, ...]] = {"sparkctl.commands._common": ("sparkctl.cli",)}


class Import(NamedTuple):
    src: str  # the importing module
    dst: str  # the imported module (or module.name for `from module import name`)
    names: tuple[str, ...] = ()  # the names a `from` import takes


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__")


@cache
def imports() -> tuple[Import, ...]:
    """Every sparkctl (and typer) import in src/, wherever it sits in the file."""
    out: list[Import] = []
    for path in sorted(SRC.rglob("*.py")):
        mod = module_name(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module.startswith("sparkctl") or node.module == "typer":
                    out.append(Import(mod, node.module, tuple(a.name for a in node.names)))
            elif isinstance(node, ast.Import):
                out += [Import(mod, a.name) for a in node.names if a.name.startswith(("sparkctl", "typer"))]
    return tuple(out)


def unit(mod: str) -> str:
    """The package or top-level module a module belongs to: sparkctl.lifecycle.up -> sparkctl.lifecycle."""
    return ".".join(mod.split(".")[:2])


def under(name: str, *pkgs: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in pkgs)


def _inside(edges: tuple[Import, ...] | list[Import]) -> list[Import]:
    return [e for e in edges if e.dst.startswith("sparkctl.")]


# ------------------------------------------------------------------------------ the rules
def unplaced(edges) -> list[str]:
    units = {unit(e.src) for e in edges} | {unit(e.dst) for e in _inside(edges)}
    return [f"{u} has no floor in FLOORS" for u in sorted(units) if u != "sparkctl" and u not in FLOOR]


def upward(edges) -> list[str]:
    bad = []
    for e in _inside(edges):
        s, d = FLOOR.get(unit(e.src)), FLOOR.get(unit(e.dst))
        if s is not None and d is not None and d > s and (e.src, e.dst) not in UPWARD_ALLOWED:
            bad.append(f"upward: {e.src} (floor {FLOORS[s][0]}) imports {e.dst} (floor {FLOORS[d][0]})")
    return bad


NEVERS: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = [
    # (rule, importers, what they may never import)
    (
        "the profile imports nothing above the base",
        ("sparkctl.profile",),
        tuple(u for u, f in FLOOR.items() if f > FLOOR["sparkctl.profile"]),
    ),
    (
        "engines never import planning, flows or the CLI",
        ("sparkctl.engines",),
        tuple(u for u, f in FLOOR.items() if f > FLOOR["sparkctl.engines"]),
    ),
    (
        "facts do not judge (no findings) nor read the profile",
        ("sparkctl.facts",),
        ("sparkctl.findings", "sparkctl.profile"),
    ),
    ("the node program imports nothing of sparkctl", ("sparkctl.node",), ("sparkctl",)),
]


def nevers(edges) -> list[str]:
    bad = []
    for rule, importers, forbidden in NEVERS:
        for e in _inside(edges):
            if under(e.src, *importers) and under(e.dst, *forbidden):
                bad.append(f"{rule}: {e.src} imports {e.dst}")
    bad += [
        f"typer is the CLI's: {e.src} imports typer"
        for e in edges
        if e.dst == "typer" and not under(e.src, "sparkctl.commands", "sparkctl.cli")
    ]
    return bad


def flow_entry_points(edges) -> list[str]:
    flows = FLOORS[FLOOR["sparkctl.lifecycle"]][1]
    bad = []
    for e in _inside(edges):
        s, d = unit(e.src), unit(e.dst)
        if s != d and s.removeprefix("sparkctl.") in flows and d.removeprefix("sparkctl.") in flows:
            entries = ENTRY_POINTS.get(d, ())
            target = e.dst if e.dst in _modules() else e.dst.rsplit(".", 1)[0]
            if target not in entries:
                bad.append(
                    f"a flow reaches another through its entry points {entries}: {e.src} imports {e.dst}"
                )
    return bad


def flow_graph(edges) -> dict[str, set[str]]:
    flows = {f"sparkctl.{u}" for u in FLOORS[FLOOR["sparkctl.lifecycle"]][1]}
    g: dict[str, set[str]] = {f: set() for f in flows}
    for e in _inside(edges):
        s, d = unit(e.src), unit(e.dst)
        if s != d and s in flows and d in flows:
            g[s].add(d)
    return g


def flow_depth(edges) -> int:
    """How many flows stand on each other at the most (a flow alone: 1)."""
    g = flow_graph(edges)

    def depth(f: str, seen: frozenset[str] = frozenset()) -> int:
        return 1 + max((depth(d, seen | {f}) for d in g[f] if d not in seen), default=0)

    return max(depth(f) for f in g)


def private_names(edges) -> list[str]:
    """Nothing imports another module's _private name (nor an underscore module from outside)."""
    bad = []
    for e in _inside(edges):
        for n in e.names:
            if n.startswith("_") and f"{e.dst}.{n}" not in _modules():
                bad.append(f"private name: {e.src} imports {n} from {e.dst}")
        mods = [e.dst] + [f"{e.dst}.{n}" for n in e.names if f"{e.dst}.{n}" in _modules()]
        for m in mods:
            private = any(p.startswith("_") and not p.startswith("__") for p in m.split("."))
            own = m.rsplit(".", 1)[0]  # an underscore module is its package's own
            if private and not under(e.src, own, *SHARED_PRIVATE_MODULES.get(m, ())):
                bad.append(f"private module: {e.src} imports {m}")
    return bad


def unit_graph(edges) -> dict[str, set[str]]:
    g: dict[str, set[str]] = {}
    for e in _inside(edges):
        s, d = unit(e.src), unit(e.dst)
        if s != d and d != "sparkctl":
            g.setdefault(s, set()).add(d)
            g.setdefault(d, set())
    return g


def strong_components(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of two or more nodes of a graph (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def cycles(edges) -> list[str]:
    """Strongly connected sets of two or more units, each with the arrows that tie it."""
    out = []
    for comp in strong_components(unit_graph(edges)):
        ties = sorted(
            {
                f"{e.src} -> {e.dst}"
                for e in _inside(edges)
                if unit(e.src) in comp and unit(e.dst) in comp and unit(e.src) != unit(e.dst)
            }
        )
        out.append(f"cycle {comp}: " + "; ".join(ties))
    return out


def file_graph(edges) -> dict[str, set[str]]:
    """Module -> the modules of its own package or top-level unit it imports (a `from package
    import module` names the module)."""
    mods = _modules()
    g: dict[str, set[str]] = {}
    for e in _inside(edges):
        named = [f"{e.dst}.{n}" for n in e.names if f"{e.dst}.{n}" in mods]
        targets = named or [e.dst if e.dst in mods else e.dst.rsplit(".", 1)[0]]
        for d in targets:
            if d != e.src and unit(d) == unit(e.src):
                g.setdefault(e.src, set()).add(d)
                g.setdefault(d, set())
    return g


def circles_inside_units(edges) -> list[list[str]]:
    """Circles of files inside one package (a circle across units is `cycles`)."""
    return strong_components(file_graph(edges))


@cache
def _modules() -> frozenset[str]:
    return frozenset(module_name(p) for p in SRC.rglob("*.py"))


# ------------------------------------------------------------------------------ the tests
def test_every_package_and_top_level_module_has_a_floor() -> None:
    assert not unplaced(imports()), "\n".join(unplaced(imports()))


def test_nothing_imports_a_higher_floor() -> None:
    bad = upward(imports())
    assert len(UPWARD_ALLOWED) <= 1 and not bad, "\n".join(bad)


def test_the_nevers_hold() -> None:
    bad = nevers(imports())
    assert not bad, "\n".join(bad)


def test_a_flow_reaches_another_only_through_its_entry_points() -> None:
    bad = flow_entry_points(imports())
    assert not bad, "\n".join(bad)


def test_few_flow_entry_points_and_flows_stacked_at_most_three_deep() -> None:
    assert sum(len(v) for v in ENTRY_POINTS.values()) <= MAX_ENTRY_POINTS
    assert flow_depth(imports()) <= MAX_FLOW_DEPTH, {
        k: sorted(v) for k, v in flow_graph(imports()).items() if v
    }


def test_no_module_imports_another_modules_private_names() -> None:
    bad = private_names(imports())
    assert not bad, "\n".join(bad)


def test_no_import_cycle_between_packages_and_top_level_modules() -> None:
    bad = cycles(imports())
    assert not bad, "\n".join(bad)


def test_at_most_four_circles_of_files_inside_one_package() -> None:
    found = circles_inside_units(imports())
    assert all(c in found for c in KNOWN_CIRCLES), "a known circle is gone: strike it from KNOWN_CIRCLES"
    rest = [c for c in found if c not in KNOWN_CIRCLES]
    assert len(rest) <= MAX_CIRCLES_INSIDE, "\n".join(map(str, rest))
    fifth = (*imports(), Import("sparkctl.recipes.schema", "sparkctl.recipes.build", ("build",)))
    more = circles_inside_units(fifth)
    assert len(more) == len(found) + 1
    assert any({"sparkctl.recipes.build", "sparkctl.recipes.schema"} <= set(c) for c in more)


def test_the_node_program_uses_only_relative_imports_of_its_own_files() -> None:
    for path in (SRC / "node").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                assert not node.module.startswith("sparkctl"), f"{path.name} imports {node.module}"


def test_the_rules_catch_an_engines_to_planning_import() -> None:
    """A deliberately added engines -> planning import (typing-only counts) is reported by the
    floors, the nevers and the cycle check (planning imports engines)."""
    fake = Import("sparkctl.engines.sglang", "sparkctl.planning.build", ("Plan",))
    edges = (*imports(), fake)
    assert any(
        "sparkctl.engines.sglang (floor engines) imports sparkctl.planning.build" in v for v in upward(edges)
    )
    assert (
        "engines never import planning, flows or the CLI: sparkctl.engines.sglang imports sparkctl.planning.build"
        in nevers(edges)
    )
    (cycle,) = cycles(edges)
    assert "sparkctl.engines" in cycle and "sparkctl.planning" in cycle
    # and the other rules on their own wrong imports
    assert nevers((Import("sparkctl.node.base", "sparkctl.errors", ("UsageError",)),))
    assert nevers((Import("sparkctl.profile.schema", "sparkctl.engines", ("get_engine",)),))
    assert private_names((Import("sparkctl.lifecycle.up", "sparkctl.lifecycle.steps", ("_log_hint",)),))
    assert private_names((Import("sparkctl.ship.run", "sparkctl.connectors._paramiko"),))
    assert flow_entry_points((Import("sparkctl.benchmark.switch", "sparkctl.lifecycle.steps", ("observe",)),))
    assert unplaced((Import("sparkctl.newpkg.x", "sparkctl.errors"),))
    # a fourth flow stacked on bench -> up -> preflight
    deeper = (*imports(), Import("sparkctl.preflight.checks.gpus", "sparkctl.gpu.fabric", ("x",)))
    assert flow_depth(deeper) == MAX_FLOW_DEPTH + 1
