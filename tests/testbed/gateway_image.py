"""The gateway image for the testbed (issue 38, planning/gateway.py): Debian bookworm's HAProxy 2.6
(`apt-get install haproxy` on the host, what scripts/install-deps installs) with the shared
libraries it loads, in one layer, no shell and no package manager: the binary the recipe in
images/gateway ships, without a registry.

Cached like the other test images: CACHE_DIR/gateway-<recipe hash>.tar (the hash covers the
binary's size and mtime and this recipe's version), `docker load`ed into a lab node's dockerd and
tagged as planning/gateway.py's GATEWAY_IMAGE.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from sparkctl.planning.gateway import CONFIG_PATH, GATEWAY_IMAGE, KEYS_PATH
from tests.testbed.images import CACHE_DIR, _add_dir, _add_file, _add_symlink, _shared_libs, _write_archive

if TYPE_CHECKING:
    from tests.testbed.lab import Lab, LabNode

HAPROXY = "/usr/sbin/haproxy"
RECIPE_VERSION = b"gateway-v2"
IMAGE_CONFIG = {
    "Env": ["PATH=/usr/sbin:/usr/bin"],
    "WorkingDir": "/",
    "Cmd": ["haproxy", "-db", "-f", CONFIG_PATH],
    "User": "65534:65534",
    "Labels": {"org.sparkctl.gateway": "haproxy"},
}


def haproxy_path() -> str | None:
    return shutil.which("haproxy") or (HAPROXY if os.path.exists(HAPROXY) else None)


def recipe_key() -> str:
    st = os.stat(HAPROXY)
    return hashlib.sha256(RECIPE_VERSION + f"{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]


def _write_rootfs(path: Path) -> None:
    with tarfile.open(path, "w") as tar:
        for d in ("/usr", "/usr/sbin", "/usr/lib", "/usr/lib64", "/etc", "/proc", "/sys", "/dev", "/run"):
            _add_dir(tar, d)
        for d in sorted({os.path.dirname(CONFIG_PATH), os.path.dirname(KEYS_PATH)} - {"/run"}):
            _add_dir(tar, d)
        _add_dir(tar, "/tmp", 0o1777)
        _add_symlink(tar, "/lib", "usr/lib")
        _add_symlink(tar, "/lib64", "usr/lib64")
        _add_symlink(tar, "/sbin", "usr/sbin")
        _add_file(tar, "/usr/sbin/haproxy", Path(HAPROXY).read_bytes(), 0o755)
        _add_file(
            tar,
            "/etc/passwd",
            b"root:x:0:0:root:/:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/:/usr/sbin/nologin\n",
        )
        _add_file(tar, "/etc/group", b"root:x:0:\nnogroup:x:65534:\n")
        added = set()
        for lib in sorted(_shared_libs([HAPROXY])):
            dest = os.path.join(os.path.realpath(os.path.dirname(lib)), os.path.basename(lib))
            if dest not in added and os.path.exists(lib):
                added.add(dest)
                _add_file(tar, dest, Path(os.path.realpath(lib)).read_bytes(), 0o755)


def gateway_archive() -> tuple[Path, str]:
    """(path, image id) of the cached archive, built once per host and recipe."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    path = CACHE_DIR / f"gateway-{recipe_key()}.tar"
    with open(CACHE_DIR / "gateway-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            with tempfile.TemporaryDirectory(dir=CACHE_DIR) as tmp:
                _write_rootfs(Path(tmp, "layer.tar"))
                _write_archive(
                    Path(tmp, "layer.tar"), Path(tmp, "image.tar"), IMAGE_CONFIG, "gateway (HAProxy)"
                )
                Path(tmp, "image.tar").replace(path)
    with tarfile.open(path) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
    return path, "sha256:" + manifest[0]["Config"].removesuffix(".json")


def install_gateway_image(lab: Lab, node: str | LabNode) -> str:
    """Load the gateway image into `node`'s dockerd, tagged GATEWAY_IMAGE; its image id."""
    path, image_id = gateway_archive()
    n = lab.node(node)
    subprocess.run(
        ["docker", "-H", n.docker_host, "load", "-q", "-i", str(path)], check=True, capture_output=True
    )
    repo, tag = GATEWAY_IMAGE.rsplit(":", 1)
    lab.docker(n).images.get(image_id).tag(repo, tag)
    return image_id
