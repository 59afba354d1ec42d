"""The registry of preflight checks, derived from the `Check` classes under preflight/checks/.

Names never change once released: users put them in `--ignore` and scripts read them from
`--json`. docs/preflight.md documents every one with the symptom it prevents.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil

from sparkctl.errors import UsageError
from sparkctl.preflight import checks as _checks_pkg
from sparkctl.preflight.base import Check


def _discover() -> dict[str, Check]:
    for mod in pkgutil.iter_modules(_checks_pkg.__path__):
        importlib.import_module(f"{_checks_pkg.__name__}.{mod.name}")
    found: list[type[Check]] = []
    todo = list(Check.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if "name" in cls.__dict__:  # concrete: a base like _Netdevs names no check
            found.append(cls)
    found.sort(key=lambda c: c.order)
    return {c.name: c() for c in found}


REGISTRY: dict[str, Check] = _discover()

# name -> one line: what it checks (the docs say which symptom it prevents), in report order.
CHECKS: dict[str, str] = {name: c.summary for name, c in REGISTRY.items()}

# Findings some checks emit under a more precise name; --only/--ignore of the group covers them.
ALIASES: dict[str, str] = {alias: name for name, c in REGISTRY.items() for alias in c.aliases}

# The quick subset `up` runs before starting anything (all within about a second on a LAN).
FAST_CHECKS: frozenset[str] = frozenset(name for name, c in REGISTRY.items() if c.fast)


def group_of(check: str) -> str:
    return ALIASES.get(check, check)


def sub_names() -> set[str]:
    """Finding names of other packages a check runs (Launch: the engine's launch checks), valid in --only/--ignore."""
    out: set[str] = set()
    for c in REGISTRY.values():
        subnames = getattr(c, "subnames", None)
        if subnames is not None:
            out |= set(subnames())
    return out


def validate_names(names: set[str] | frozenset[str], option: str, extra: set[str] | None = None) -> set[str]:
    """Check user-given names (case-insensitive); 'all' means every check. Unknown -> UsageError."""
    known = {**{n.lower(): n for n in CHECKS}, **{n.lower(): n for n in ALIASES}}
    known |= {n.lower(): n for n in (extra or set()) | sub_names()}
    out: set[str] = set()
    for name in names:
        if name.lower() == "all":
            out |= set(CHECKS)
            continue
        canon = known.get(name.lower())
        if canon is None:
            near = difflib.get_close_matches(name, [*CHECKS, *ALIASES], n=1, cutoff=0.5)
            raise UsageError(
                f"{option}: unknown check '{name}'",
                fix=(f"did you mean '{near[0]}'? " if near else "")
                + f"checks: {', '.join(CHECKS)} (or 'all')",
            )
        out.add(canon)
    return out
