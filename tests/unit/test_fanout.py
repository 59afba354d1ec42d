"""The one fan-out result type: outcomes per key, policies, cancellation."""

from __future__ import annotations

import _thread
import threading

import pytest

from sparkctl.errors import ConnectError, SparkctlError
from sparkctl.fanout import Cancelled, CancelToken, fan_out


def test_collects_values_and_errors_in_submission_order() -> None:
    def fn(key: str) -> str:
        if key == "b":
            raise ValueError("boom")
        return key.upper()

    res = fan_out(["c", "b", "a"], fn)
    assert list(res) == ["c", "b", "a"]
    assert res.ok == {"c": "C", "a": "A"}
    assert isinstance(res.errors["b"], ValueError)
    assert res["b"].node == "b" and not res["b"].ok
    assert not res.all_ok


def test_values_or_raise_names_node_rank_and_the_others() -> None:
    def fn(rank: int) -> int:
        if rank == 1:
            raise ConnectError("ssh refused", fix="start sshd")
        if rank == 2:
            raise OSError("socket closed")
        return rank

    res = fan_out([0, 1, 2], fn, where=lambda r: (f"spark{r + 1}", r))
    with pytest.raises(ConnectError) as info:
        res.values_or_raise()
    err = info.value
    assert (err.node, err.rank) == ("spark2", 1)
    assert "also failed: node spark3 rank 2" in err.message
    assert err.fix == "start sshd"


def test_a_bug_is_wrapped_with_its_place_and_cause() -> None:
    res = fan_out(["spark1"], lambda k: 1 / 0)
    with pytest.raises(SparkctlError) as info:
        res.values_or_raise()
    assert info.value.node == "spark1"
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_all_ok_returns_values() -> None:
    assert fan_out(["x", "y"], len).values_or_raise() == {"x": 1, "y": 1}
    assert fan_out([], len).values_or_raise() == {}


def test_ctrl_c_returns_at_once_and_cancels_the_token() -> None:
    token = CancelToken()
    release = threading.Event()
    finished: list[str] = []

    def stuck(key: str) -> None:
        release.wait(30)  # a worker blocked in I/O that never checks the token
        finished.append(key)

    # deliver a real KeyboardInterrupt to this (main) thread after 0.3 s
    threading.Timer(0.3, _thread.interrupt_main).start()
    with pytest.raises(KeyboardInterrupt):
        fan_out(["a", "b"], stuck, cancel=token)
    # handled while both workers were still blocked: fan_out did not wait for them
    assert finished == [] and not release.is_set()
    release.set()
    assert token.cancelled
    with pytest.raises(Cancelled):
        token.check()


def test_a_key_given_twice_runs_once_and_never_waits_for_a_second_answer() -> None:
    """Two replicas on one box give the node list ['box', 'box']: the fan-out must return."""
    calls: list[str] = []
    out: dict[str, object] = {}

    def fn(key: str) -> str:
        calls.append(key)
        return key.upper()

    worker = threading.Thread(target=lambda: out.update(res=fan_out(["box", "box", "b"], fn)), daemon=True)
    worker.start()
    worker.join(10)  # a guard against the hang, not a speed assertion
    assert not worker.is_alive(), "fan_out waited for a second answer of a duplicated key"
    res = out["res"]
    assert list(res) == ["box", "b"]
    assert res.values_or_raise() == {"box": "BOX", "b": "B"}
    assert sorted(calls) == ["b", "box"]


def test_a_slow_fan_out_says_what_it_still_waits_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node that accepts TCP and never answers SSH made status/preflight/logs silent for 20 s."""
    import threading

    from sparkctl import fanout

    said: list[str] = []
    monkeypatch.setattr(fanout, "notice", said.append)
    monkeypatch.setattr(fanout, "SLOW_AFTER_S", 0.2)
    monkeypatch.setattr(fanout, "SLOW_EVERY_S", 0.3)
    release = threading.Event()

    def work(node: str) -> str:
        if node == "spark2":
            fan_out(["inner"], lambda _k: release.wait(5.0))  # a worker's own fan-out: not said again
        return node

    threading.Timer(1.0, release.set).start()
    assert fan_out(["spark1", "spark2"], work).values_or_raise() == {"spark1": "spark1", "spark2": "spark2"}
    assert said and all(s.startswith("still waiting for spark2 (") for s in said), said
    assert len(said) >= 2, said  # at 0.2 s, then every 0.3 s until 1 s


def test_a_fast_fan_out_says_nothing_and_other_keys_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from sparkctl import fanout

    said: list[str] = []
    monkeypatch.setattr(fanout, "notice", said.append)
    fan_out(["a", "b"], lambda k: k)
    assert said == []
    monkeypatch.setattr(fanout, "SLOW_AFTER_S", 0.2)
    fan_out([0, 1], lambda i: time.sleep(0.5 * i))
    assert said and said[0].startswith("still waiting for 1 of 2 answers ("), said
