"""RouterClient against the real sglang-router: listing, taking a worker out, putting it back."""

from __future__ import annotations

import json
import urllib.request

import pytest

from sparkctl.clients.router import RouterClient, RouterError


def chat(base: str) -> str:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", data=body, method="POST")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=5) as resp:
        return json.loads(resp.read())["choices"][0]["message"]["content"]


def test_requests_spread_over_both_workers(router: str, workers) -> None:
    assert {chat(router) for _ in range(4)} == {"w1", "w2"}


def test_remove_takes_a_worker_out_and_add_puts_it_back(router: str, workers) -> None:
    client = RouterClient(router)
    w1 = workers[0]
    assert client.remove(w1.url)
    client.wait_for("w1 gone", lambda ws: all(w.url != w1.url for w in ws), timeout=10)
    assert {chat(router) for _ in range(4)} == {"w2"}
    assert not client.remove(w1.url)  # already out: nothing to remove

    client.add(w1.url)
    client.wait_for("w1 back", lambda ws: any(w.url == w1.url and w.healthy for w in ws), timeout=10)
    assert {chat(router) for _ in range(4)} == {"w1", "w2"}


def test_a_dead_worker_is_marked_unhealthy(router: str, workers) -> None:
    client = RouterClient(router)
    workers[1].close()
    listing = client.wait_for(
        "w2 unhealthy", lambda ws: any(w.url == workers[1].url and not w.healthy for w in ws), timeout=15
    )
    assert [w.healthy for w in listing if w.url == workers[0].url] == [True]


def test_unreachable_router_is_one_error_with_a_fix() -> None:
    from tests.router.conftest import free_port

    with pytest.raises(RouterError) as info:
        RouterClient(f"http://127.0.0.1:{free_port()}", timeout=1).workers()
    assert "not reachable" in info.value.message and info.value.fix


def test_wait_for_names_what_it_waited_for(router: str, workers) -> None:
    with pytest.raises(RouterError, match="never true not seen"):
        RouterClient(router).wait_for("never true", lambda ws: False, timeout=0.3)


def test_sync_workers_adds_the_planned_and_removes_the_rest(router: str, workers) -> None:
    """What `up` does to a kept router: its worker set becomes the plan's, without a restart."""
    from sparkctl.lifecycle.router import sync_workers
    from tests.router.conftest import StandinWorker

    client = RouterClient(router)
    w3 = StandinWorker("w3")
    try:
        want = [workers[0].url, w3.url]
        assert sync_workers(client, client.workers(), want)
        listing = client.wait_for(
            "the planned set, healthy",
            lambda ws: {w.url for w in ws} == set(want) and all(w.healthy for w in ws),
            timeout=15,
        )
        assert sorted(w.url for w in listing) == sorted(want)
        assert {chat(router) for _ in range(4)} == {"w1", "w3"}
        assert not sync_workers(client, listing, want)  # already the plan's: nothing changes
    finally:
        w3.close()


def test_renew_takes_restarted_workers_out_so_sync_adds_them_fresh(router: str, workers) -> None:
    import time

    from sparkctl.lifecycle.router import renew, sync_workers

    client = RouterClient(router)
    before = {w.url: w.id for w in client.workers()}
    urls = [w.url for w in workers]
    renew(client, urls, time.monotonic() + 15)
    assert not {w.url for w in client.workers()} & set(urls)
    assert sync_workers(client, client.workers(), urls)
    listing = client.wait_for(
        "both back, healthy", lambda ws: {w.url for w in ws if w.healthy} == set(urls), timeout=15
    )
    assert all(before[w.url] != w.id for w in listing)  # new worker entries, not the old ones
