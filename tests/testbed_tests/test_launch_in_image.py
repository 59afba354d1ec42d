"""The in-image parser check against a real dockerd over real SSH: a short, settable timeout and
the real cause (the image's python3 hangs; the image is missing), then the local fallback."""

from __future__ import annotations

import pytest

from sparkctl.connectors.ssh import SshConnector
from sparkctl.engines.sglang.launch.flags import check_flags
from sparkctl.engines.support.in_image import InImageError, image_runner
from tests.testbed.images import ENGINE_TAG, build_image_with_files
from tests.testbed_tests.test_connectors import connector as ssh_connector

pytestmark = pytest.mark.testbed
HANGING_TAG = "sparkctl-test/engine-hanging-python:latest"


def connector(lab, node: str = "spark1") -> SshConnector:
    return ssh_connector(lab, node)


@pytest.fixture(scope="module")
def hanging_image(lab) -> str:
    """The engine image whose python3 (first on PATH) never returns."""
    build_image_with_files(
        lab.docker("spark1"),
        ENGINE_TAG,
        HANGING_TAG,
        {"/usr/local/bin/python3": b"#!/bin/sh\nexec sleep 600\n"},
    )
    return HANGING_TAG


def _no_flag_check_containers(lab) -> bool:
    return not lab.docker("spark1").containers.list(
        all=True, filters={"label": "sparkctl.purpose=flag-check"}
    )


def test_hanging_python_times_out_with_the_real_cause(lab, hanging_image: str) -> None:
    said: list[str] = []
    with connector(lab) as conn:
        run = image_runner(conn, hanging_image, timeout_s=3, node="spark1", progress=said.append)
        with pytest.raises(InImageError) as exc:
            run(["python3", "-c", "print(1)"])
    msg = str(exc.value)
    assert "timed out after 3 s" in msg and "spark1" in msg and hanging_image in msg
    assert "no serving image" not in msg
    assert said and "timeout 3 s" in said[0]
    assert _no_flag_check_containers(lab)  # the hung container was removed


def test_missing_image_is_named(lab) -> None:
    with connector(lab) as conn:
        run = image_runner(conn, "sparkctl-test/not-there:1", timeout_s=3, node="spark1")
        with pytest.raises(InImageError, match=r"image sparkctl-test/not-there:1 is not present on spark1"):
            run(["python3", "-c", "print(1)"])


def test_check_flags_reports_the_image_cause_then_falls_back(lab, hanging_image: str, monkeypatch) -> None:
    monkeypatch.setenv("SPARKCTL_SGLANG_PYTHON", "/nonexistent/python3")  # no local parser either
    said: list[str] = []
    with connector(lab) as conn:
        result = check_flags(
            ["--tp", "2"], image_runner(conn, hanging_image, timeout_s=2, node="spark1"), progress=said.append
        )
    assert result.method == "skipped"
    assert "in the image: timed out after 2 s" in result.problem
    assert "locally:" in result.problem
    assert any("trying a local SGLang" in m for m in said)
