"""The floors of docs/architecture.md, checked on every import in src/ (function-level ones too).

cli/commands -> cores (preflight, discover, lifecycle, ship, launch, verify, benchmark, gpu,
recipes, plan) -> facts / engines / connectors -> profile, errors, findings, units.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "sparkctl"


def imports() -> list[tuple[str, str]]:
    """(importing module, imported module) for every `import sparkctl...` / `from sparkctl... import`."""
    out = []
    for path in sorted(SRC.rglob("*.py")):
        mod = ".".join(path.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                out += [(mod, n) for n in names if n.startswith("sparkctl")]
            elif isinstance(node, ast.Import):
                out += [(mod, a.name) for a in node.names if a.name.startswith(("sparkctl", "typer"))]
            if isinstance(node, ast.ImportFrom) and node.module == "typer":
                out.append((mod, "typer"))
    return out


def under(name: str, *pkgs: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in pkgs)


def violations(rule: str, bad: list[tuple[str, str]]) -> list[str]:
    return [f"{rule}: {src} imports {dst}" for src, dst in bad]


def test_nothing_imports_the_cli() -> None:
    top = ("sparkctl.commands", "sparkctl.cli", "sparkctl.__main__")
    bad = [
        (s, d) for s, d in imports() if under(d, "sparkctl.commands", "sparkctl.cli") and not under(s, *top)
    ]
    assert not bad, "\n".join(violations("commands/ is the top floor", bad))


def test_only_the_cli_imports_typer() -> None:
    bad = [(s, d) for s, d in imports() if d == "typer" and not under(s, "sparkctl.commands", "sparkctl.cli")]
    assert not bad, "\n".join(violations("typer is the CLI's", bad))


def test_facts_import_no_core() -> None:
    allowed = (
        "sparkctl.facts",
        "sparkctl.errors",
        "sparkctl.connectors.base",
        "sparkctl.fanout",
        "sparkctl.units",
    )
    bad = [(s, d) for s, d in imports() if under(s, "sparkctl.facts") and not under(d, *allowed)]
    assert not bad, "\n".join(violations("facts/ is a floor below the cores", bad))


def test_engines_and_connectors_import_no_core() -> None:
    cores = (
        "sparkctl.preflight",
        "sparkctl.discover",
        "sparkctl.lifecycle",
        "sparkctl.ship",
        "sparkctl.verify",
        "sparkctl.benchmark",
        "sparkctl.gpu",
        "sparkctl.recipes",
        "sparkctl.top",
        "sparkctl.export",
    )
    low = ("sparkctl.engines", "sparkctl.connectors", "sparkctl.facts", "sparkctl.profile")
    # engines delegate launch safety to sparkctl.launch lazily (the SGLang rules live there for now)
    bad = [(s, d) for s, d in imports() if under(s, *low) and under(d, *cores)]
    assert not bad, "\n".join(violations("engines/connectors/facts/profile sit below the cores", bad))
