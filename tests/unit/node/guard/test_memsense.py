"""The guard's node-side decisions (sparkctl/node/guard/memsense.py, pure parts) and the shipped program."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from sparkctl.node.guard.memsense import GIB, Watch, kernel_match, kmsg_record, meminfo, psi_full_total
from sparkctl.profile.memory import KERNEL_PATTERNS

NODE = Path(__file__).resolve().parents[4] / "src" / "sparkctl" / "node" / "guard"
CFG = {
    "min_available": 4 * GIB,
    "psi_full_pct": 30.0,
    "psi_window_s": 3.0,
    "interval_s": 1.0,
    "fast_interval_s": 0.1,
    "horizon_s": 5.0,
}


def test_meminfo_and_psi_parse_the_kernels_text() -> None:
    mem = meminfo("MemTotal:       24684084 kB\nMemAvailable:   23155752 kB\nHugePages_Total:       0\n")
    assert mem == {"MemTotal": 24684084 * 1024, "MemAvailable": 23155752 * 1024, "HugePages_Total": 0}
    psi = "some avg10=1.00 avg60=0.00 avg300=0.00 total=500\nfull avg10=0.50 avg60=0.00 avg300=0.00 total=1234\n"
    assert psi_full_total(psi) == 1234


def test_trips_below_the_floor_and_not_above() -> None:
    w = Watch(CFG)
    assert w.feed(0.0, 5 * GIB, 0) is None
    cause = w.feed(1.0, 4 * GIB - 1, 0)
    assert cause["kind"] == "memavailable" and "< 4.00 GiB" in cause["reason"]


def test_samples_fast_near_the_floor_or_when_falling_towards_it() -> None:
    w = Watch(CFG)
    w.feed(0.0, 100 * GIB, 0)
    assert w.next_wait() == 1.0  # far and steady
    w.feed(1.0, 30 * GIB, 0)  # falling 70 GiB/s: would cross 4 GiB within the horizon
    assert w.rate() > 0 and w.next_wait() == 0.1
    w = Watch(CFG)
    w.feed(0.0, 7 * GIB, 0)  # under twice the floor
    assert w.next_wait() == 0.1


def test_psi_full_share_over_the_window_trips() -> None:
    w = Watch(CFG)
    for t in range(4):  # 0.1 s of full stall per second: 10 %
        assert w.feed(float(t), 50 * GIB, t * 100_000) is None
    # then 0.9 s per second for three seconds: 90 % of the window
    causes = [w.feed(float(t), 50 * GIB, 300_000 + (t - 3) * 900_000) for t in range(4, 7)]
    assert causes[-1]["kind"] == "psi" and "memory PSI full" in causes[-1]["reason"]


def test_without_psi_nothing_trips_on_it() -> None:
    w = Watch(CFG)
    assert all(w.feed(float(t), 50 * GIB, None) is None for t in range(10))


def test_node_modules_import_nothing_of_sparkctl_but_the_stripped_lines() -> None:
    for name in ("memsense.py", "memguard.py", "../flock.py"):
        lines = (NODE / name).read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sparkctl"):
                assert lines[node.lineno - 1].endswith("# node: strip"), (name, node.lineno)
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("sparkctl") for a in node.names), name


def test_the_shipped_program_runs_alone(tmp_path: Path) -> None:
    from sparkctl.lifecycle.guard import program

    text = program()
    assert "sparkctl.node" not in text
    prog = tmp_path / "memguard-x.py"
    prog.write_text(text)
    out = subprocess.run(
        [sys.executable, "-S", str(prog), "status", "nothere"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == '{"running": null, "state": null, "trips": []}'


# Real-shaped /dev/kmsg records (`prio,seq,usec,flags;message`): the driver's own, a user-space
# write to /dev/kmsg (the kernel gives it facility 1), and the kernel's segfault line of a process
# that named itself `NVRM: Xid ` with prctl(PR_SET_NAME) (the line starts with its comm).
XID = "3,1201,5123456789,-;NVRM: Xid (PCI:0000:01:00): 31, pid=4242, name=python3, Ch 00000008"
FORGED_USER = "12,1202,5123457000,-;NVRM: Xid (PCI:0000:01:00): 31, pid=1, name=x"
FORGED_COMM = "6,1203,5123458000,-;NVRM: Xid [4242]: segfault at 0 ip 00007f00 sp 00007ffc error 4 in a.out[400000+1000]"
FORGED_FILE = (
    "6,1204,5123459000,-;NVRM: [4242]: segfault at 0 ip 0 sp 0 error 4 in NV_ERR_NO_MEMORY.so[7f+1000]"
)


def test_kmsg_records_carry_their_facility() -> None:
    assert kmsg_record(XID) == (5123.456789, 0, XID.split(";", 1)[1])
    assert kmsg_record(FORGED_USER)[1] == 1
    assert kmsg_record(FORGED_COMM)[1] == 0  # the kernel's own line, but it starts with a comm


def test_patterns_match_only_a_kernel_messages_own_start() -> None:
    pats = [re.compile(p) for p in KERNEL_PATTERNS]
    assert kernel_match(pats, *kmsg_record(XID)[1:]) == r"^NVRM: Xid \(PCI:[0-9a-fA-F]"
    for forged in (FORGED_USER, FORGED_COMM, FORGED_FILE):
        assert kernel_match(pats, *kmsg_record(forged)[1:]) is None, forged
    # the old unanchored default matched the comm-led segfault line
    assert re.compile(r"NVRM: Xid ").search(kmsg_record(FORGED_COMM)[2])
    alloc = "4,1206,1,-;NVRM: Xid (: page allocation failure: order:5, mode:0x40dc0"
    assert kernel_match(pats, *kmsg_record(alloc)[1:]) is None
    mid = "0,1205,1,-;Out of memory: Killed process 4242 (NVRM: Xid (P)"
    assert kernel_match(pats, *kmsg_record(mid)[1:]) is None


def test_only_the_clusters_ranks_are_targets_never_its_router_or_gateways(monkeypatch) -> None:
    """The guard kills what holds model memory: the ranks; the router and a gateway hold none."""
    from sparkctl.node.guard import memsense

    def listed(name: str, labels: dict) -> dict:
        return {"Id": name, "Names": [f"/{name}"], "Labels": {"sparkctl.cluster": "lab", **labels}}

    items = [
        listed("r0", {"sparkctl.rank": "0"}),
        listed("r0-gateway", {"sparkctl.role": "gateway"}),
        listed("router", {"sparkctl.role": "router"}),
        {**listed("other", {}), "Labels": {"sparkctl.cluster": "elsewhere"}},
    ]

    def docker(method: str, path: str) -> tuple[int, object]:
        if path.startswith("/containers/json"):
            return 200, items
        return 200, {"State": {"Pid": 4242}}

    monkeypatch.setattr(memsense, "docker", docker)
    monkeypatch.setattr(memsense, "pid_start", lambda pid: "1")
    targets = memsense.Targets("lab")
    targets.refresh()
    assert sorted(targets.known) == ["r0"] and targets.error is None
