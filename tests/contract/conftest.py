"""What the contract suites share: one XDG cache for the session, so that the local SGLang
parser's answer for a flag set (torch imported: seconds) is computed once, not once per test."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("xdg-cache")
