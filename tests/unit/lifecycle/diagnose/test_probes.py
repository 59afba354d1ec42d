"""The node facts diagnose gathers (lifecycle/diagnose/probes.py): every one asked, bounded,
and the shell ones run as written (here, through the local connector's batch)."""

from __future__ import annotations

from sparkctl.connectors.local import LocalConnector
from sparkctl.facts.probe import run_batch
from sparkctl.lifecycle.diagnose.probes import NODE_PROBES


def test_every_fact_a_maintainer_asks_for_is_probed_with_a_bound():
    argvs = {name: " ".join(p.argv) for name, p in NODE_PROBES.items()}
    for needle in (
        "uname",
        "nvidia-smi -q",
        "driver_version",
        "ibv_devinfo",
        "ip -d addr",
        "docker info",
        "df",
        "meminfo",
    ):
        assert any(needle in a for a in argvs.values()), needle
    assert "NVRM|Xid|oom" in argvs["kernel-log.txt"] and "/proc/pressure" in argvs["psi.txt"]
    assert all(0 < p.timeout <= 30 for p in NODE_PROBES.values())


def test_the_batch_runs_here_and_keeps_failures_as_facts():
    got = run_batch(LocalConnector("n"), NODE_PROBES)
    assert set(got) == set(NODE_PROBES)
    assert got["kernel.txt"]["rc"] == 0 and got["kernel.txt"]["stdout"].startswith("Linux")
    assert "mtu=" in got["links.txt"]["stdout"] and "MemTotal" in got["memory.txt"]["stdout"]
    assert all(isinstance(v, dict) and {"rc", "stdout", "stderr"} <= set(v) for v in got.values())
