"""Tests mirror src, both ways: tests/unit/<package>/test_<module>.py tests
src/sparkctl/<package>/<module>.py (or the package <module>/); a name may go on after the
module's, `test_<module>_<aspect>.py`. Every module has such a test file, or a line in NO_TEST_FILE
that says why (a package's __init__.py that defines nothing only hands names on: exempt)."""

from __future__ import annotations

import re
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


# Modules without a test file of their name when the rule came (issue 45): their tests, where
# they have any, sit in another module's file or in tests/testbed_tests/. The list only shrinks
# (an entry that gets its test file, or whose module goes, fails the rule): a new module brings
# its test file, or a line in NO_TEST_FILE saying why.
UNTESTED_BEFORE_THE_RULE: frozenset[str] = frozenset(
    {
        "benchmark/chart.py",
        "benchmark/runner.py",
        "benchmark/switch.py",
        "benchmark/workloads.py",
        "clients/deadline.py",
        "clients/prompts.py",
        "commands/_common.py",
        "commands/_findings.py",
        "commands/_layouts.py",
        "commands/bench.py",
        "commands/down.py",
        "commands/export.py",
        "commands/fabric.py",
        "commands/image.py",
        "commands/logs.py",
        "commands/preflight.py",
        "commands/supervise.py",
        "commands/switch.py",
        "commands/top.py",
        "commands/up.py",
        "commands/upgrade.py",
        "commands/verify.py",
        "connectors/_paramiko.py",
        "connectors/base.py",
        "connectors/docker_ssh.py",
        "connectors/hostkeys.py",
        "connectors/local.py",
        "connectors/ssh.py",
        "discover/facts.py",
        "discover/render.py",
        "discover/workflow.py",
        "engines/__init__.py",
        "engines/sglang/__init__.py",
        "engines/sglang/cli_flags.py",
        "engines/sglang/flags.py",
        "engines/sglang/launch/archs.py",
        "engines/sglang/launch/fixes.py",
        "engines/sglang/launch/flags.py",
        "engines/sglang/launch/mem_fraction.py",
        "engines/sglang/launch/memory_terms.py",
        "engines/sglang/launch/pipeline.py",
        "engines/sglang/launch/report.py",
        "engines/sglang/launch/rules_attention.py",
        "engines/sglang/launch/rules_dflash.py",
        "engines/support/in_image.py",
        "engines/support/launch_check.py",
        "engines/vllm/check.py",
        "engines/vllm/cli_flags.py",
        "engines/vllm/flags.py",
        "errors.py",
        "export/k8s_pod.py",
        "export/k8s_router.py",
        "export/yamltext.py",
        "facts/disk.py",
        "facts/hfcache.py",
        "facts/net.py",
        "findings.py",
        "gpu/fabric_report.py",
        "gpu/fabric_worker.py",
        "lifecycle/lock.py",
        "lifecycle/preview.py",
        "lifecycle/rolling_rules.py",
        "lifecycle/router.py",
        "lifecycle/state.py",
        "lifecycle/up.py",
        "lifecycle/watch.py",
        "node/base.py",
        "node/push.py",
        "planning/model.py",
        "planning/router.py",
        "preflight/base.py",
        "preflight/checks/cables.py",
        "preflight/checks/disk.py",
        "preflight/checks/docker.py",
        "preflight/checks/fabric.py",
        "preflight/checks/gid_index.py",
        "preflight/checks/gpus.py",
        "preflight/checks/image.py",
        "preflight/checks/launch.py",
        "preflight/checks/memory.py",
        "preflight/checks/pingdf.py",
        "preflight/checks/roce.py",
        "preflight/checks/router.py",
        "preflight/checks/weights.py",
        "preflight/registry.py",
        "preflight/runner.py",
        "profile/base.py",
        "profile/memory.py",
        "profile/reference.py",
        "profile/router.py",
        "profile/security.py",
        "ship/__init__.py",
        "ship/errors.py",
        "ship/image.py",
        "ship/run.py",
        "ship/weights.py",
        "ship/weights_push.py",
        "top/__init__.py",
        "units.py",
        "verify/base.py",
        "verify/chat_checks.py",
        "verify/runner.py",
        "verify/tool_checks.py",
        "yaml_model.py",
    }
)
# New modules without a test file of their own, each with why.
NO_TEST_FILE: dict[str, str] = {}


def target(test: Path, src: Path = SRC, unit: Path = UNIT) -> Path | None:
    """The module or package a test file tests, or None."""
    rel = test.relative_to(unit)
    where = src.joinpath(*rel.parts[:-1])
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


def held(module: Path) -> bool:
    """The rule holds every module but __main__ and an __init__.py that defines nothing."""
    if module.name == "__main__.py":
        return False
    return module.name != "__init__.py" or bool(
        re.search(r"^(async def|def|class) ", module.read_text(), re.M)
    )


def untested(src: Path = SRC, unit: Path = UNIT) -> list[str]:
    tested = {target(t, src, unit) for t in unit.rglob("test_*.py")}
    return sorted(p.relative_to(src).as_posix() for p in src.rglob("*.py") if held(p) and p not in tested)


def test_every_module_has_its_test_file_or_says_why() -> None:
    missing = set(untested())
    new = sorted(missing - UNTESTED_BEFORE_THE_RULE - set(NO_TEST_FILE))
    assert not new, (
        "modules without tests/unit/<package>/test_<module>.py (write it, or say why in NO_TEST_FILE):\n"
        + "\n".join(new)
    )
    stale = sorted((UNTESTED_BEFORE_THE_RULE | set(NO_TEST_FILE)) - missing)
    assert not stale, "listed as untested but tested now, or gone (strike them):\n" + "\n".join(stale)


def test_every_unit_test_file_names_an_existing_module_path() -> None:
    bad = strays()
    assert not bad, "\n".join(bad)


def test_the_mapping_finds_the_module_and_refuses_a_stray(tmp_path: Path) -> None:
    assert target(UNIT / "lifecycle" / "test_rolling.py") == SRC / "lifecycle" / "rolling.py"
    assert target(UNIT / "planning" / "test_build_topology.py") == SRC / "planning" / "build.py"
    assert target(UNIT / "preflight" / "test_checks.py") == SRC / "preflight" / "checks" / "__init__.py"
    assert target(UNIT / "lifecycle" / "test_plan.py") is None  # plan.py is not under lifecycle/
    assert target(UNIT / "test_nothing_here.py") is None
    assert held(SRC / "engines" / "sglang" / "__init__.py")  # it defines the engine
    assert not held(SRC / "clients" / "__init__.py") and not held(SRC / "__main__.py")


def test_a_new_module_without_its_test_file_is_found(tmp_path: Path) -> None:
    src, unit = tmp_path / "src", tmp_path / "unit"
    for path, text in {
        src / "pkg" / "__init__.py": '"""hands names on"""\n',
        src / "pkg" / "old.py": "def f(): ...\n",
        src / "pkg" / "new.py": "def g(): ...\n",
        unit / "pkg" / "test_old.py": "",
    }.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert untested(src, unit) == ["pkg/new.py"]
