"""Shared pytest setup: the real multi-node testbed fixtures (see docs/testbed.md).

Testbed tests carry `@pytest.mark.testbed`. Outside CI they skip, with the reason, when the
testbed cannot run here (not root, tools missing); with env CI set, such a skip is a failure.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from tests.testbed.lab import Lab, LabError, missing_prerequisites

# Every sparkctl run in the suite is checked for a traceback on stderr (tests/cli_stderr.py).
pytest_plugins = ["tests.cli_stderr"]


def _in_ci() -> bool:
    return bool(os.environ.get("CI"))


def require_testbed() -> None:
    """Skip (fail in CI) when this machine cannot host a lab."""
    problems = missing_prerequisites()
    if problems:
        reason = "testbed unavailable: " + "; ".join(problems)
        if _in_ci():
            pytest.fail(reason + " (CI must run testbed tests)", pytrace=False)
        pytest.skip(reason)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("testbed"):
        require_testbed()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if not item.get_closest_marker("testbed"):
        return
    if report.skipped and _in_ci() and not hasattr(report, "wasxfail"):
        # In CI a testbed test must run: any skip (importorskip, skipif, ...) counts as a failure.
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"testbed test skipped in CI: {reason}"
    elif report.when == "setup" and call.excinfo is not None and call.excinfo.errisinstance(LabError):
        # A lab that fails to come up: say which step and why, not a fixture traceback.
        report.longrepr = f"testbed lab failed to come up: {call.excinfo.value}"


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    """A 2-node lab shared by the session, stand-in engine image loaded on both nodes.

    Fault knobs (MTU, sshd, disk) are undone after each test that uses it; containers are not.
    """
    require_testbed()
    with Lab(nodes=2) as the_lab:
        the_lab.install_engine_image()
        yield the_lab


@pytest.fixture(autouse=True)
def _reset_lab_faults(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "lab" in request.fixturenames:
        request.getfixturevalue("lab").reset()


@pytest.fixture
def make_lab() -> Iterator[Callable[..., Lab]]:
    """Factory for a fresh lab (own nodes, own engines), torn down after the test.

    make_lab(nodes=2, mtu=9000, disk_mb=2048, engine_image=True, name=None) -> Lab
    """
    require_testbed()
    labs: list[Lab] = []

    def make(
        nodes: int = 2,
        mtu: int = 9000,
        disk_mb: int = 2048,
        engine_image: bool = True,
        name: str | None = None,
    ) -> Lab:
        new = Lab(name, nodes=nodes, mtu=mtu, disk_mb=disk_mb)
        labs.append(new)
        new.up()
        if engine_image:
            new.install_engine_image()
        return new

    yield make
    errors = []
    for old in reversed(labs):
        try:
            old.down()
        except LabError as e:
            errors.append(str(e))
    if errors:
        raise LabError("; ".join(errors))


REAL_SERVER_DIRS = ("server", "router")  # session-scoped real servers (transformers serve, sglang-router)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (scripts/test), the tests of one real server run on one worker, so the
    server starts once and its timing tests do not race a second copy of it."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        parts = item.path.relative_to(config.rootpath).parts
        if len(parts) > 1 and parts[0] == "tests" and parts[1] in REAL_SERVER_DIRS:
            item.add_marker(pytest.mark.xdist_group(parts[1]))
