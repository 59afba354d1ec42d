"""The closing lines of scripts/test: the 20 slowest tests over every tier's JUnit XML, then one count.

JUnit XML is pytest's own report format (`--junitxml`), read with the stdlib's XML parser. Exits 1
when the reports hold no test at all, so an empty run cannot pass silently.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

SLOWEST = 20


def cases(paths: list[Path]) -> list[tuple[float, str, str]]:
    """(seconds, test id, outcome) for every test case in the reports."""
    out = []
    for path in paths:
        if not path.is_file():
            continue
        for case in ET.parse(path).getroot().iter("testcase"):
            outcome = "passed"
            for tag in ("failure", "error", "skipped"):
                if case.find(tag) is not None:
                    outcome = {"failure": "failed", "error": "failed"}.get(tag, tag)
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            out.append((float(case.get("time") or 0.0), name, outcome))
    return out


def main(argv: list[str]) -> int:
    found = cases([Path(a) for a in argv])
    if not found:
        print("error: the test reports hold no test", file=sys.stderr)
        return 1
    print(f"\n== slowest {SLOWEST} tests of the whole run")
    for seconds, name, outcome in sorted(found, reverse=True)[:SLOWEST]:
        print(f"{seconds:8.2f}s  {name}" + ("" if outcome == "passed" else f"  ({outcome})"))
    counts = {k: sum(1 for c in found if c[2] == k) for k in ("passed", "failed", "skipped")}
    print(f"total: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
