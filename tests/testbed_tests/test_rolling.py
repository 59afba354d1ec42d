"""Rolling `switch` and `upgrade` on the 2-node lab (issue #19): `dp2` = one stand-in replica per
node behind the real sglang-router, a steady client load through the router the whole time, and
the replicas replaced one at a time with zero failed requests. Every stand-in request takes
STANDIN_GEN_DELAY, so requests really are in flight when a replica leaves the router. The load
streams: the router retries a cut non-streamed request on another replica (so such a load stays
at 0 failed even without the drain), but it cannot retry a stream it has begun to pass on, so
a replica stopped before it drained shows up as failed requests here (with the drain disabled:
12 of 36 under round_robin, 16 of 40 under cache_aware).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sparkctl.clients.router import RouterClient
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file
from tests.testbed.loadgen import LoadGen
from tests.testbed.profiles import ENGINE_IMAGE, seed_weights, write_rolling_profile
from tests.testbed_tests.conftest import cli, cluster_containers, report, rolled_under_load

pytestmark = pytest.mark.testbed
# Seconds per request: longer than taking a replica out and stopping it takes, so one stopped
# without draining would cut streams.
GEN_DELAY = 2.0
NEXT_IMAGE = "sparkctl-test/engine:next"


def runs_config(lab, cluster: str, mode: str, config_hash: str) -> dict[str, str]:
    """{container: config hash} of the cluster's running engine containers; all must be `mode`'s."""
    found = {}
    for containers in cluster_containers(lab, cluster).values():
        for c in containers:
            if c.labels.get("sparkctl.role", "engine") == "engine":
                assert c.status == "running" and c.labels["sparkctl.mode"] == mode, (c.name, c.status)
                found[c.name] = c.labels["sparkctl.config_hash"]
    return found


@pytest.fixture
def rolling_lab(lab, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(profile, state dir) with dp2/dp2b; the engine image also tagged NEXT_IMAGE on every node
    (an "upgrade" to it); the cluster is taken down and checked empty after."""
    state = tmp_path / "state"
    seed_weights(lab)
    repo, tag = NEXT_IMAGE.split(":")
    for node in lab.nodes:
        lab.docker(node).images.get(ENGINE_IMAGE).tag(repo, tag)
    path = write_rolling_profile(lab, tmp_path / "sparkctl.yaml", gen_delay=GEN_DELAY)
    yield path, state
    cli(state, path, "down")
    assert not any(cluster_containers(lab, load_profile_file(path).cluster).values())
    for node in lab.nodes:
        lab.docker(node).images.remove(NEXT_IMAGE)


def test_rolling_switch_and_upgrade_fail_no_request(lab, rolling_lab, request) -> None:
    path, state = rolling_lab
    prof = load_profile_file(path)
    res = cli(state, path, "up", "dp2")
    assert res.returncode == 0, res.stderr
    url = build_plan(prof, "dp2").endpoint.url
    # --dry-run says it would roll, replica by replica, and changes nothing.
    dry = cli(state, path, "switch", "dp2b", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    pre = json.loads(dry.stdout)
    assert pre["rolling"] == "replicas 0, 1 one at a time", pre["rolling"]
    assert [s["container"] for s in pre["start"]] == [
        r.container_name for r in build_plan(prof, "dp2b").ranks
    ]
    assert set(runs_config(lab, prof.cluster, "dp2", build_plan(prof, "dp2").config_hash).values()) == {
        build_plan(prof, "dp2").config_hash
    }

    out, stats = rolled_under_load(state, path, url, "switch", "dp2b")
    report(request, f"rolling switch dp2 -> dp2b under load: {stats.line()}")
    assert stats.failed == 0, f"rolling switch: {stats.line()}"
    new = build_plan(prof, "dp2b")
    assert out["action"] == "rolled"
    assert [(r["index"], r["action"], r["old"]["mode"], r["new"]) for r in out["rolling"]] == [
        (i, "rolled", "dp2", {"mode": "dp2b", "config_hash": new.config_hash}) for i in (0, 1)
    ]
    assert sum(r["in_flight"] for r in out["rolling"]) > 0  # the drain had requests to wait for
    assert set(runs_config(lab, prof.cluster, "dp2b", new.config_hash).values()) == {new.config_hash}
    assert set(stats.replicas) == {"spark1", "spark2"}  # both replicas served throughout

    # upgrade: a new image.ref under the running mode (the same image under a second tag here)
    router_before = lab.docker("spark1").containers.get(new.router.container_name).id
    raw = yaml.safe_load(path.read_text())
    raw["image"]["ref"] = NEXT_IMAGE
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    upgraded = build_plan(load_profile_file(path), "dp2b")
    assert upgraded.config_hash != new.config_hash
    out, stats = rolled_under_load(state, path, url, "upgrade")
    report(request, f"rolling upgrade of dp2b (new image.ref) under load: {stats.line()}")
    assert stats.failed == 0, f"rolling upgrade: {stats.line()}"
    assert [r["old"]["config_hash"] for r in out["rolling"]] == [new.config_hash] * 2
    hashes = runs_config(lab, prof.cluster, "dp2b", upgraded.config_hash)
    assert set(hashes.values()) == {upgraded.config_hash}
    for node in ("spark1", "spark2"):
        (engine,) = [c for c in lab.docker(node).containers.list() if c.name in hashes]
        assert engine.attrs["Config"]["Image"] == NEXT_IMAGE
    # the router, the endpoint clients hold, was kept throughout
    assert lab.docker("spark1").containers.get(new.router.container_name).id == router_before


def test_a_switch_that_cannot_roll_says_why(rolling_lab) -> None:
    path, state = rolling_lab
    res = cli(state, path, "upgrade")
    assert res.returncode == 2 and "no single mode of this profile is running" in res.stderr, res.stderr
    res = cli(state, path, "up", "dp2")
    assert res.returncode == 0, res.stderr
    dry = cli(state, path, "switch", "solo", "--dry-run", "--json")
    assert json.loads(dry.stdout)["rolling"].startswith("not rolling: mode solo has 1 replica"), dry.stdout
    res = cli(state, path, "switch", "solo")
    assert res.returncode == 0, res.stderr
    assert "not rolling: mode solo has 1 replica" in res.stdout, res.stdout
    res = cli(state, path, "upgrade")  # nothing changed: nothing to do, and it says it cannot roll solo
    assert res.returncode == 0 and "already up" in res.stdout, res.stdout
    assert "mode solo has 1 replica: upgrading restarts it" in " ".join(res.stderr.split())
    res = cli(state, path, "switch", "dp2")
    assert res.returncode == 0, res.stderr
    assert "not rolling: mode solo has 1 replica" in res.stdout, res.stdout
    res = cli(state, path, "switch", "dp2b", "--no-rolling")  # forced: stop all, start all
    assert res.returncode == 0, res.stderr
    assert "not rolling" not in res.stdout and "taking it out of the router" not in res.stdout


def test_a_replica_that_fails_in_a_roll_gets_its_old_config_back_and_nothing_fails(
    lab, rolling_lab, request
) -> None:
    """dp2bad dies while loading: replica 0 is taken out, drained, stopped, fails to start, gets
    dp2 back and returns to the router; replica 1 served throughout and was never touched."""
    path, state = rolling_lab
    prof = load_profile_file(path)
    assert cli(state, path, "up", "dp2").returncode == 0
    old = build_plan(prof, "dp2")
    with LoadGen(old.endpoint.url, model="tiny-test", threads=8, stream=True) as load:
        load.wait_for(8)
        res = cli(state, path, "switch", "dp2bad")
        load.wait_for(8)
    report(request, f"failed rolling switch dp2 -> dp2bad under load: {load.stats.line()}")
    assert res.returncode == 3, res.stdout + res.stderr
    err = " ".join(res.stderr.split())
    assert "rolling switch to dp2bad stopped at replica 0" in err, err
    assert (
        f"replica 0 runs dp2 (config {old.config_hash}); replica 1 runs dp2 (config {old.config_hash})" in err
    )
    assert "rerun the same command" in err and re.search(r"sparkctl (-p \S+ )?switch dp2", err)
    assert load.stats.failed == 0, f"failed roll: {load.stats.line()}"
    assert set(runs_config(lab, prof.cluster, "dp2", old.config_hash).values()) == {old.config_hash}
    workers = RouterClient(old.endpoint.url).workers()  # both back in the router, healthy
    assert sorted((w.url, w.healthy) for w in workers) == sorted((g.worker_url, True) for g in old.groups)
