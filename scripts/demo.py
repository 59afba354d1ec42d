"""sparkctl's main job, end to end, on this machine: no GPUs or second box needed.

Brings up a real 2-node testbed (network namespaces, one sshd and one dockerd per node, a
fabric at MTU 9000; see docs/testbed.md) with the stand-in SGLang engine image on spark1 only,
writes a profile for it, then runs the real CLI: preflight (finds the image and weights missing
on spark2), ship,
preflight again, up tp2, status, a chat request, logs, switch solo, down. Tears the lab down at
the end, also on failure. Run as root: `sudo scripts/demo`.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.testbed.images import ENGINE_TAG, build_engine_image  # noqa: E402
from tests.testbed.lab import Lab, missing_prerequisites  # noqa: E402
from tests.testbed.profiles import seed_weights, write_lab_profile  # noqa: E402


def sparkctl(profile: Path, *args: str, check: bool = True) -> int:
    print(f"\n$ sparkctl {' '.join(args)}", flush=True)
    rc = subprocess.run([sys.executable, "-m", "sparkctl", *args, "-p", str(profile)]).returncode
    if check and rc != 0:
        raise SystemExit(f"demo: `sparkctl {' '.join(args)}` exited {rc}")
    return rc


def main() -> None:
    problems = missing_prerequisites()
    if problems:
        raise SystemExit("demo needs: " + "; ".join(problems) + " (run scripts/demo as root)")
    with Lab(name="demo", nodes=2) as lab, tempfile.TemporaryDirectory() as tmp:
        print(f"testbed up: {', '.join(f'{n.name} {n.mgmt_ip} (fabric {n.fabric_ip})' for n in lab.nodes)}")
        build_engine_image(lab.docker(lab.nodes[0]), tag=ENGINE_TAG)  # only spark1 has the image...
        seed_weights(lab, nodes=["spark1"])  # ...and the weights (a tiny HF-cache snapshot)
        # The API wants a key (docs/security.md): from this shell's env, never written to the profile.
        os.environ["SPARKCTL_API_KEY"] = key = secrets.token_hex(16)
        profile = write_lab_profile(
            lab, Path(tmp) / "sparkctl.yaml", engine={"api_key": {"env": "SPARKCTL_API_KEY"}}
        )
        print(f"profile: {profile}")
        sparkctl(profile, "plan", "tp2")
        sparkctl(profile, "preflight", "tp2", check=False)  # expected: image and weights missing on spark2
        sparkctl(profile, "ship", "tp2", "--dry-run")
        sparkctl(profile, "ship", "tp2")
        sparkctl(profile, "preflight", "tp2")
        sparkctl(profile, "up", "tp2")
        sparkctl(profile, "status")
        # what the stand-in serves: plain and streamed chat (it makes no tool calls)
        sparkctl(profile, "verify", "tp2", "--only", "ChatStream", "--only", "ChatToolChoiceNone")
        url = f"http://{lab.nodes[0].mgmt_ip}:30000/v1/chat/completions"
        body = json.dumps({"model": "tiny-test", "messages": [{"role": "user", "content": "hi"}]}).encode()
        try:
            urllib.request.urlopen(
                urllib.request.Request(url, body, {"Content-Type": "application/json"}), timeout=10
            )
        except urllib.error.HTTPError as exc:
            print(f"\n$ POST {url} without the API key -> HTTP {exc.code}")
        auth = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
        req = urllib.request.Request(url, body, auth)
        print(f"\n$ POST {url} with the key\n{urllib.request.urlopen(req, timeout=10).read().decode()}")
        sparkctl(profile, "logs", "--tail", "3")
        sparkctl(profile, "switch", "solo")
        sparkctl(profile, "down")
    print("\ndemo finished: testbed torn down")


if __name__ == "__main__":
    main()
