"""Tests mirror src: tests/unit/<package>/test_<module>.py tests src/sparkctl/<package>/<module>.py
(or the package <module>/); a name may go on after the module's, `test_<module>_<aspect>.py`."""

from __future__ import annotations

from pathlib import Path

UNIT = Path(__file__).resolve().parent
SRC = UNIT.parents[1] / "src" / "sparkctl"

# Cross-cutting tests that test no one module.
CROSS_CUTTING = {
    "test_code_shape.py",  # size limits over src/
    "test_import_rules.py",  # floors and nevers over src/
    "test_tests_mirror_src.py",  # this file
    "test_quickstart.py",  # the README's quickstart, end to end
    "test_ci_script.py",  # .ci/run
    "test_engine_names.py",  # engine names outside engines/ over src/
}


def target(test: Path) -> Path | None:
    """The module or package a test file tests, or None."""
    rel = test.relative_to(UNIT)
    where = SRC.joinpath(*rel.parts[:-1])
    words = rel.stem.removeprefix("test_").split("_")
    for n in range(len(words), 0, -1):
        name = "_".join(words[:n])
        for candidate in (where / f"{name}.py", where / name / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def strays() -> list[str]:
    out = []
    for test in sorted(UNIT.rglob("test_*.py")):
        if test.relative_to(UNIT).as_posix() in CROSS_CUTTING:
            continue
        if target(test) is None:
            out.append(f"{test.relative_to(UNIT.parents[1])}: no src/sparkctl module at this path")
    return out


def test_every_unit_test_file_names_an_existing_module_path() -> None:
    bad = strays()
    assert not bad, "\n".join(bad)


def test_the_mapping_finds_the_module_and_refuses_a_stray(tmp_path: Path) -> None:
    assert target(UNIT / "lifecycle" / "test_rolling.py") == SRC / "lifecycle" / "rolling.py"
    assert target(UNIT / "planning" / "test_build_topology.py") == SRC / "planning" / "build.py"
    assert target(UNIT / "preflight" / "test_checks.py") == SRC / "preflight" / "checks" / "__init__.py"
    assert target(UNIT / "lifecycle" / "test_plan.py") is None  # plan.py is not under lifecycle/
    assert target(UNIT / "test_nothing_here.py") is None
