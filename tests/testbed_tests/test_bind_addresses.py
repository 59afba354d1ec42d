"""Bind addresses, not names: nodes addressed by names the containers cannot resolve still serve.

spark1 is addressed as `spark1.lab` and spark2 as `spark2.local` (an mDNS-style name). Only this
machine's ~/.ssh/config knows them (`HostName` = the node's address); inside a container neither
resolves, so a rank started with `--host spark2.local` could not bind (the stand-in engine binds
its --host like SGLang does). `up` reads each name's IP on the node itself (the server side of
$SSH_CONNECTION) and starts the ranks on that IP.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.testbed.profiles import ENGINE_PORT, lab_profile, seed_weights
from tests.testbed_tests.conftest import engine_containers

pytestmark = pytest.mark.testbed
NAMES = {"spark1": "spark1.lab", "spark2": "spark2.local"}


def test_up_with_names_the_container_cannot_resolve_binds_the_nodes_ips(lab, tmp_path: Path) -> None:
    seed_weights(lab)
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    ips = {n.name: n.mgmt_ip for n in lab.nodes}
    (home / ".ssh" / "config").write_text(
        "".join(f"Host {name}\n  HostName {ips[node]}\n" for node, name in NAMES.items())
    )
    doc = lab_profile(lab, modes={"tp2": {"nodes": ["spark1", "spark2"], "tp": 2, "default": True}})
    for node in doc["nodes"]:
        node["address"] = NAMES[node["name"]]
    assert "host" not in doc["engine"]  # each rank binds its node's own address
    path = tmp_path / "named.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(tmp_path / "state"), "COLUMNS": "200"}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "sparkctl", *args, "-p", str(path)],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )

    plan = cli("plan", "tp2")
    assert plan.returncode == 0, plan.stderr
    text = " ".join(plan.stdout.split())
    assert "address: spark2: <IP of spark2.local> (resolved at `up`)" in text
    try:
        up = cli("up", "tp2", "--skip-preflight", "--json")
        assert up.returncode == 0, up.stdout + up.stderr
        result = json.loads(up.stdout)
        assert result["endpoint"]["url"].startswith(f"http://{ips['spark1']}:"), result
        inspect = {
            n: engine_containers(lab, n, "sparkctl.mode=tp2")[0].attrs["Args"] for n in ("spark1", "spark2")
        }
        # rank 0's engine sits behind its gateway, which binds the node's IP (docs/security.md)
        assert inspect["spark1"][inspect["spark1"].index("--host") + 1] == "127.0.0.1"
        listening = lab.exec("spark1", ["ss", "-Hltn", f"sport = :{ENGINE_PORT}"]).stdout.split()
        assert f"{ips['spark1']}:{ENGINE_PORT}" in listening, listening
        args = inspect["spark2"]
        assert args[args.index("--host") + 1] == ips["spark2"], args
        st = cli("status")
        assert st.returncode == 0, st.stdout + st.stderr
    finally:
        down = cli("down")
        assert down.returncode == 0, down.stdout + down.stderr
