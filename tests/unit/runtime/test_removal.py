"""runtime/removal.py: a rank's removal takes its gateway, and a removal Docker already has in
progress (409) is waited out, not raised."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import docker.errors
import pytest
import requests

from sparkctl.planning.gateway import gateway_container_name
from sparkctl.runtime import removal


def api_error(status: int, text: str) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    return docker.errors.APIError(text, response=response, explanation=text)


class FakeApi:
    """Docker's API for a node holding `present`; `in_progress` names answer 409 to a removal
    and disappear after `polls` inspects."""

    def __init__(self, present: set[str], in_progress: set[str] = frozenset(), polls: int = 2) -> None:
        self.present, self.in_progress, self.polls = set(present), set(in_progress), polls
        self.calls: list[tuple[str, str]] = []

    def stop(self, name: str, timeout: int) -> None:
        self.calls.append(("stop", name))
        if name not in self.present:
            raise docker.errors.NotFound(name)

    def remove_container(self, name: str, force: bool) -> None:
        self.calls.append(("remove", name))
        if name in self.in_progress:
            raise api_error(409, f"removal of container {name} is already in progress")
        if name not in self.present:
            raise docker.errors.NotFound(name)
        self.present.discard(name)

    def inspect_container(self, name: str) -> dict[str, Any]:
        self.calls.append(("inspect", name))
        self.polls -= 1
        if self.polls <= 0:
            self.present.discard(name)
        if name not in self.present:
            raise docker.errors.NotFound(name)
        return {"Name": name}


def conn_for(api: FakeApi) -> Any:
    return SimpleNamespace(docker=lambda: SimpleNamespace(api=api))


@pytest.fixture(autouse=True)
def no_secret_files(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    dropped: list[str] = []
    monkeypatch.setattr(removal, "drop_secrets", lambda conn, name: dropped.append(name))
    monkeypatch.setattr(removal, "GONE_POLL_S", 0)
    return dropped


RANK = "sparkctl-lab-solo-r0"
GATEWAY = gateway_container_name(RANK)


def test_a_rank_is_stopped_removed_and_its_gateway_after_it(no_secret_files: list[str]) -> None:
    api = FakeApi({RANK, GATEWAY})
    assert removal.remove(conn_for(api), RANK, grace=3) is True
    assert api.calls == [("stop", RANK), ("remove", RANK), ("remove", GATEWAY)]
    assert api.present == set() and no_secret_files == [RANK, GATEWAY]


def test_a_gateway_removed_by_name_takes_nothing_else() -> None:
    api = FakeApi({RANK, GATEWAY})
    assert removal.remove(conn_for(api), GATEWAY, grace=None) is True
    assert api.present == {RANK}


def test_a_missing_rank_still_takes_its_gateway() -> None:
    api = FakeApi({GATEWAY})
    assert removal.remove(conn_for(api), RANK) is False
    assert api.present == set()


def test_a_removal_already_in_progress_is_waited_out_not_raised() -> None:
    api = FakeApi({RANK, GATEWAY}, in_progress={GATEWAY}, polls=3)
    assert removal.remove(conn_for(api), RANK, grace=None) is True
    assert api.calls.count(("inspect", GATEWAY)) == 3 and GATEWAY not in api.present


def test_any_other_conflict_is_raised() -> None:
    api = FakeApi({RANK})
    api.remove_container = lambda name, force: (_ for _ in ()).throw(api_error(409, "conflict: in use"))  # type: ignore[method-assign]
    with pytest.raises(docker.errors.APIError):
        removal.remove(conn_for(api), RANK, grace=None)
