"""ship's node states: a node whose Docker does not answer is said so, never "image absent"."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.connectors import NodePool
from sparkctl.errors import DockerDownError, ExitCode
from sparkctl.fanout import CancelToken
from sparkctl.profile import load_profile_file
from sparkctl.ship.sources import gather, image_source

ROOT = Path(__file__).resolve().parents[3]


def test_docker_not_running_is_an_exit_5_error_not_an_absent_image(monkeypatch: pytest.MonkeyPatch) -> None:
    # The real node program on this machine (the profile's node is `local`), its engine socket
    # pointing where no Docker listens: what a node with Docker stopped answers.
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    prof = load_profile_file(ROOT / "profiles" / "solo-spark.yaml")
    with NodePool(prof) as pool:
        states = gather(prof, pool, ["spark1"], "sglang-dflash:spark", [], deep=False, cancel=CancelToken())
    state = states["spark1"]
    assert state.error is None and isinstance(state.docker_error, DockerDownError)
    with pytest.raises(DockerDownError) as err:
        image_source(states, ["spark1"], "sglang-dflash:spark", None)
    assert err.value.exit_code == ExitCode.CONNECT and err.value.node == "spark1"
    assert "Docker is not answering" in err.value.message and "absent" not in err.value.message
    assert "systemctl start docker" in (err.value.fix or "")


def test_unreachable_nodes_are_exit_5_naming_each_not_an_image_on_no_node() -> None:
    """ship --dry-run with every node unreachable exited 3 saying the image "is on no node"."""
    from sparkctl.errors import ConnectError, SparkctlError
    from sparkctl.ship.sources import NodeState

    states = {
        "spark1": NodeState("spark1", error=ConnectError("SSH connection refused", node="spark1")),
        "spark2": NodeState("spark2", error=OSError("timed out")),
    }
    with pytest.raises(SparkctlError) as err:
        image_source(states, ["spark1", "spark2"], "sglang-dflash:spark", None)
    errors = [err.value, *err.value.also]
    assert err.value.exit_code == ExitCode.CONNECT and "no node" not in err.value.message
    assert [e.node for e in errors] == ["spark1", "spark2"], errors


class _Conn:
    def __init__(self, node: str, answers: dict, asked: list) -> None:
        self.node, self.answers, self.asked = node, answers, asked

    def run(self, argv, input=None, timeout=None):  # noqa: A002 - the Connector's name
        import json

        from sparkctl.connectors.base import RunResult

        self.asked.append((self.node, json.loads(input)))
        return RunResult(self.node, tuple(argv), 0, json.dumps({"image": self.answers[self.node]}), "")


class _Pool:
    def __init__(self, answers: dict) -> None:
        self.asked: list = []
        self.answers = answers

    def get(self, node: str) -> _Conn:
        return _Conn(node, self.answers, self.asked)


OLD, NEW = "sha256:" + "1" * 64, "sha256:" + "2" * 64
FULL = {"layers": ["sha256:" + "9" * 64], "size": 5, "history": [5], "chains": [], "free": 1 << 40}


def _states(**images: dict):
    from sparkctl.ship.sources import NodeState

    return {n: NodeState(n, image=img) for n, img in images.items()}


def test_short_answers_are_completed_only_where_a_transfer_follows() -> None:
    """The hint (the source's ID last time) let nodes whose image is that one answer short. Nothing
    to send: nobody is asked again. The source rebuilt: the peers still on the old image are asked
    for their layers and free space; a new peer: the short source is asked for its layer sizes."""
    from sparkctl.ship.sources import complete_images

    same = {"id": OLD, "layers": FULL["layers"], "size": 5, "same": True}
    pool = _Pool({})
    states = _states(spark1=same, spark2=same)
    complete_images(pool, states, "spark1", ["spark1", "spark2"], "img:1", CancelToken())  # type: ignore[arg-type]
    assert pool.asked == [] and states["spark2"].image == same

    pool = _Pool({"spark2": {"id": OLD, **FULL}})
    states = _states(spark1={"id": NEW, **FULL}, spark2=same)  # rebuilt on spark1: answered in full
    complete_images(pool, states, "spark1", ["spark2"], "img:1", CancelToken())  # type: ignore[arg-type]
    assert pool.asked == [("spark2", {"image": "img:1"})] and states["spark2"].image["chains"] == []

    pool = _Pool({"spark1": {"id": OLD, **FULL}})
    states = _states(spark1=same, spark2={"chains": [], "free": 1 << 40})  # spark2 lacks it
    complete_images(pool, states, "spark1", ["spark2"], "img:1", CancelToken())  # type: ignore[arg-type]
    assert [n for n, _ in pool.asked] == ["spark1"] and states["spark1"].image["history"] == [5]


def test_a_source_that_no_longer_has_the_image_when_asked_again_is_an_error_naming_it() -> None:
    from sparkctl.errors import SparkctlError
    from sparkctl.ship.sources import complete_images

    pool = _Pool({"spark1": {"chains": []}})
    states = _states(spark1={"id": OLD, "same": True}, spark2={})
    with pytest.raises(SparkctlError) as err:
        complete_images(pool, states, "spark1", ["spark2"], "img:1", CancelToken())  # type: ignore[arg-type]
    assert err.value.node == "spark1" and "no image img:1" in err.value.message and err.value.fix


def test_weights_streams_are_bounded_by_the_spare_cores_of_every_node_of_the_push() -> None:
    """Issue 44: a stream costs a core on the source and on each peer; a node busy serving (its
    1-minute load near its cores) gets one stream, an idle 20-core node five, never more than 8."""
    from sparkctl.ship.sources import NodeState, stream_bound, streams_for

    assert streams_for(20) == 5 and streams_for(64) == 8 and streams_for(2) == 1
    assert streams_for(20, load=17.5) == 1 and streams_for(20, load=12.0) == 4
    assert streams_for(20, load=40.0) == 1  # never none
    states = {"spark1": NodeState("spark1", cores=20), "spark2": NodeState("spark2", cores=20, load=14.2)}
    assert stream_bound(states, ["spark1"]) == 5 and stream_bound(states, ["spark1", "spark2"]) == 2


def test_state_reports_the_nodes_load_for_the_stream_bound() -> None:
    from sparkctl.connectors.local import LocalConnector
    from sparkctl.remote.ops import run_op

    doc = run_op(LocalConnector("spark1"), "state", payload={})
    assert isinstance(doc["load"], float) and doc["load"] >= 0.0 and doc["cores"] >= 1


def test_the_image_goes_compressed_only_when_every_end_of_its_push_has_zstd() -> None:
    """A peer without zstd could not unpack it: the whole push is plain then; `--no-compress` too.
    zstd's threads are the source's stream share of its spare cores."""
    from sparkctl.ship.image import Codec
    from sparkctl.ship.sources import NodeState, image_codec

    states = {
        "spark1": NodeState("spark1", cores=20, zstd=True),
        "spark2": NodeState("spark2", cores=2, zstd=True),
        "spark3": NodeState("spark3", cores=20, zstd=False),
    }
    assert image_codec(states, ["spark1", "spark2"]) == Codec("zstd", 5)
    assert image_codec(states, ["spark1", "spark2", "spark3"]) is None
    assert image_codec(states, ["spark3", "spark1"]) is None
    assert image_codec(states, ["spark1", "spark2"], wanted=False) is None


def test_state_says_whether_the_node_has_zstd(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from sparkctl.connectors.local import LocalConnector
    from sparkctl.remote.ops import run_op

    assert run_op(LocalConnector("spark1"), "state", payload={})["zstd"] is True  # scripts/install-deps
    monkeypatch.setenv("PATH", str(tmp_path))  # python3 is found by its absolute path: sys.executable
    assert run_op(LocalConnector("spark1"), "state", payload={})["zstd"] is False
