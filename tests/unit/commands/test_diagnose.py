"""`sparkctl diagnose` from a machine that reaches no node: the bundle is still written, names every
node as unreachable, and holds no secret the profile reads (the key, raw or base64)."""

from __future__ import annotations

import base64
import json
import tarfile
from pathlib import Path

from tests.unit.commands._unreachable import API_KEY, sparkctl, unreachable_copy


def test_bundle_with_every_node_unreachable_lists_them_and_holds_no_key(tmp_path: Path) -> None:
    prof = unreachable_copy(tmp_path)
    out = tmp_path / "diag.tar.gz"
    res = sparkctl(tmp_path, "diagnose", "tp2", "-o", str(out), "-p", str(prof))
    assert res.returncode == 0, (res.stdout, res.stderr)
    with tarfile.open(out) as tar:
        blobs = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    manifest = json.loads(next(v for k, v in blobs.items() if k.endswith("manifest.json")))
    assert {"spark1", "spark2"} <= set(json.dumps(manifest.get("unreachable", manifest)).split('"'))
    needles = [API_KEY.encode(), base64.b64encode(API_KEY.encode())]
    leaks = [name for name, blob in blobs.items() if any(n in blob for n in needles)]
    assert not leaks, leaks
