"""`export k8s --secrets`: the Secret's values are what `up` writes into the containers (the
same renderer), a file-held secret is read on its node."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
import yaml

from sparkctl.connectors.local import LocalConnector
from sparkctl.export.k8s import export_k8s
from sparkctl.export.k8s_secret import secret_manifest, secret_values
from sparkctl.profile import load_profile_text

ROOT = Path(__file__).resolve().parents[3]


def test_a_file_held_secret_is_read_on_its_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = tmp_path / "hf-token"
    token.write_text("hf_fromfile\n")
    monkeypatch.setenv("APIKEY", "sk-1")
    text = (ROOT / "profiles/solo-spark.yaml").read_text()
    text = text.replace("{file: ~/.config/sparkctl/hf-token}", f"{{file: {token}}}")
    text = text.replace("  host: 127.0.0.1 ", "  api_key: {env: APIKEY}\n  host: 127.0.0.1 ")
    out = export_k8s(load_profile_text(text), "solo", "llm")
    asked: list[str] = []

    def connect(node: str) -> LocalConnector:
        asked.append(node)
        return LocalConnector(node)

    values = secret_values(out.plan, connect)
    assert asked == ["spark1"]
    gateway_hash = hashlib.sha256(b"Bearer sk-1").hexdigest()  # the gateway's key file: a hash only
    assert values == {
        "HF_TOKEN": b"hf_fromfile",
        "sparkctl-sglang.yaml": b'api-key: "sk-1"\n',
        "keys.sha256": f"{gateway_hash}\n".encode(),
    }
    doc = secret_manifest(out.secret_name or "", "llm", {}, values)
    assert {k: base64.b64decode(v) for k, v in doc["data"].items()} == values
    assert "hf_fromfile" not in "".join(out.files.values())
    # up bind-mounts the file; the pod mounts the same path from the Secret
    c = out.objects["solo.yaml"][0]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert {"name": "secrets-run-secrets", "mountPath": "/run/secrets", "readOnly": True} in c["volumeMounts"]
    assert str(token) not in yaml.safe_dump(out.objects)
