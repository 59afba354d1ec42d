"""What the contract suites share: one XDG cache for the session, so that the local SGLang
parser's answer for a flag set (torch imported: seconds) is computed once, not once per test; and the shipped
models as header-only copies in an HF cache; and a local Docker engine that answers but holds no
image (rank 0 before `ship`)."""

from __future__ import annotations

import json
import shutil
import socketserver
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import yaml


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("xdg-cache")


# The shipped models as header-only fixtures of their real shape (config.json + safetensors headers:
# tests/fixtures/models/make_fixtures.py). A shipped model without a fixture fails every suite here.
MODEL_FIXTURES = {
    "Qwen/Qwen3.6-27B-GPTQ-Int4": "qwen3.6-27b-gptq-int4",
    "Qwen/Qwen3.6-27B-NVFP4": "qwen3.6-27b-nvfp4",
    "z-lab/Qwen3.6-27B-DFlash": "qwen3.6-27b-dflash",
    "Qwen/Qwen3-30B-A3B-FP8": "qwen3-30b-a3b-fp8",
    "Qwen/Qwen3-14B-AWQ": "qwen3-14b-awq",
    "Qwen/Qwen2.5-Coder-7B-Instruct-AWQ": "qwen2.5-coder-7b-awq",
}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def hf_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An HF cache holding every shipped profile's target and draft at its pinned revision."""
    root = tmp_path_factory.mktemp("hf") / "hub"
    for path in sorted((ROOT / "profiles").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        for model in [s["model"] for s in (data.get("models") or {"": data}).values()]:
            _cache_model(root, path, model)
    return root.parent


def _cache_model(root: Path, path: Path, model: dict) -> None:
    """One profile's (or fleet service's) target and draft, as header-only copies in the cache."""
    for ref in (model["target"], model.get("draft")):
        if not ref:
            continue
        assert ref["id"] in MODEL_FIXTURES, f"{path.name}: no fixture of {ref['id']}'s shape"
        rev = str(ref.get("revision") or "main")
        is_hex = all(c in "0123456789abcdef" for c in rev)
        commit = rev.ljust(40, "0") if is_hex else f"{len(rev):040x}"
        repo = root / ("models--" + ref["id"].replace("/", "--"))
        snap = repo / "snapshots" / commit
        if not snap.is_dir():
            shutil.copytree(ROOT / "tests" / "fixtures" / "models" / MODEL_FIXTURES[ref["id"]], snap)
        if not is_hex:
            (repo / "refs").mkdir(exist_ok=True)
            (repo / "refs" / rev).write_text(commit)


class _DockerWithoutImages(BaseHTTPRequestHandler):
    """Docker's engine API as an engine that holds no image and runs no container answers it."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self) -> None:
        path = self.path.split("?")[0]
        if path.endswith("/_ping"):
            return self._send(200, "OK")
        if path.endswith("/version"):
            return self._send(200, {"ApiVersion": "1.43", "Version": "24.0.7", "MinAPIVersion": "1.12"})
        if path.endswith("/info"):
            info = {
                "ServerVersion": "24.0.7",
                "Runtimes": {"runc": {}, "nvidia": {}},
                "DefaultRuntime": "runc",
            }
            return self._send(200, {**info, "DockerRootDir": "/var/lib/docker"})
        if path.endswith(("/containers/json", "/images/json")):
            return self._send(200, [])
        return self._send(404, {"message": f"No such image or container: {path}"})

    do_GET = do_POST = do_DELETE = do_HEAD = _answer

    def _send(self, code: int, body: object) -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hangs up early (the node program's raw reads) is no failure of ours


@pytest.fixture(scope="session")
def docker_without_images() -> Iterator[str]:
    """DOCKER_HOST of a local Docker that answers but lacks the image: rank 0 before `ship`."""
    home = Path(tempfile.mkdtemp(dir="/tmp"))  # a unix socket's path: under 108 bytes
    server = _UnixServer(str(home / "docker.sock"), _DockerWithoutImages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"unix://{home / 'docker.sock'}"
    server.shutdown()
    server.server_close()
    shutil.rmtree(home, ignore_errors=True)
