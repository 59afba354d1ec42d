"""Local test images (no registry is reachable): the stand-in SGLang engine and layered variants.

The engine rootfs is busybox-static plus the host's /usr/bin/python3.11, its stdlib and the shared
libraries it needs, plus the stdlib-only stand-in `sglang.launch_server` from ./standin, plus the
real `sglang_router` (PyPI sglang-router) with its dependency closure copied from this host's
installed distributions, as real SGLang images ship it. The rootfs tar is cached on the host
(keyed by its inputs, the distributions' versions among them); each call imports it into an engine.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import io
import json
import os
import platform
import re
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import docker

ENGINE_TAG = "sparkctl-test/engine:latest"
# The same rootfs with the router as its command, for profiles that name a router image.
ROUTER_TAG = "sparkctl-test/router:latest"
ROUTER_DIST = "sglang-router"
SITE_PACKAGES = "/usr/lib/python3/dist-packages"  # on Debian's python3.11's sys.path
STANDIN_SGLANG_VERSION = "0.5.23"
STANDIN_DIR = Path(__file__).parent / "standin"
CACHE_DIR = Path(os.environ.get("SPARKLAB_CACHE", "/var/cache/sparklab"))
PYTHON = "/usr/bin/python3.11"
PY_STDLIB = "/usr/lib/python3.11"
BUSYBOX = "/bin/busybox"
# Big stdlib parts the stand-in never imports.
STDLIB_SKIP = {
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "pydoc_data",
    "site-packages",
    "dist-packages",
}
IMAGE_CONFIG = {
    "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"],
    "WorkingDir": "/",
    "Cmd": ["python3", "-m", "sglang.launch_server"],
    "Labels": {"org.sparkctl.standin": "1", "org.sparkctl.sglang.version": STANDIN_SGLANG_VERSION},
}


def _standin_files() -> dict[str, bytes]:
    """Image path -> content of the stand-in sglang package."""
    pkg = "/usr/lib/python3/dist-packages/sglang"
    version = f'__version__ = "{STANDIN_SGLANG_VERSION}"\n'
    return {
        f"{pkg}/__init__.py": b'"""sparkctl test stand-in for SGLang."""\n\nfrom sglang.version import __version__\n',
        f"{pkg}/version.py": version.encode(),
        f"{pkg}/launch_server.py": (STANDIN_DIR / "sglang" / "launch_server.py").read_bytes(),
    }


def _router_dists() -> list[importlib.metadata.Distribution]:
    """sglang-router and its runtime Requires closure (extras left out), as installed on this host."""
    from packaging.requirements import Requirement

    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [ROUTER_DIST]
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in found:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError as e:
            from tests.testbed.lab import LabError

            raise LabError(f"router image: {name} is not installed here (pip install -e '.[test]')") from e
        found[name] = dist
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return [found[k] for k in sorted(found)]


def _router_files() -> dict[str, Path]:
    """Image path -> host file of every installed file of the closure that lives in site-packages
    (console scripts outside it are left out; the router runs as `python3 -m`)."""
    files: dict[str, Path] = {}
    for dist in _router_dists():
        for f in dist.files or []:
            if f.parts[0] == ".." or not (path := Path(f.locate())).is_file():
                continue
            files[f"{SITE_PACKAGES}/{f.as_posix()}"] = path
    return files


def _shared_libs(binaries: list[str]) -> set[str]:
    """The libraries the binaries load (ldd's headers naming the binaries themselves left out)."""
    out = subprocess.run(["ldd", *binaries], capture_output=True, text=True).stdout
    return set(re.findall(r"(/\S+\.so[.\d]*)", out)) - set(binaries)


def _rootfs_key() -> str:
    h = hashlib.sha256(b"rootfs-v4")
    for content in _standin_files().values():
        h.update(content)
    for dist in _router_dists():
        h.update(f"{dist.metadata['Name']}=={dist.version}".encode())
    for p in (PYTHON, BUSYBOX):
        st = os.stat(p)
        h.update(f"{p}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def _add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name.lstrip("/"))
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(name.lstrip("/"))
    info.type, info.mode = tarfile.DIRTYPE, mode
    tar.addfile(info)


def _add_symlink(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name.lstrip("/"))
    info.type, info.linkname = tarfile.SYMTYPE, target
    tar.addfile(info)


def _write_rootfs(path: Path) -> None:
    with tarfile.open(path, "w") as tar:
        for d in (
            "/usr",
            "/usr/bin",
            "/usr/lib",
            "/usr/lib64",
            "/usr/lib/python3",
            "/usr/lib/python3/dist-packages",
            "/usr/lib/python3/dist-packages/sglang",
            "/bin",
            "/etc",
            "/root",
            "/proc",
            "/sys",
            "/dev",
            "/var",
            "/usr/local",
            "/usr/local/bin",
        ):
            _add_dir(tar, d)
        _add_dir(tar, "/tmp", 0o1777)
        _add_symlink(tar, "/lib", "usr/lib")
        _add_symlink(tar, "/lib64", "usr/lib64")
        _add_symlink(tar, "/sbin", "bin")
        _add_file(tar, "/bin/busybox", Path(BUSYBOX).read_bytes(), 0o755)
        applets = subprocess.run(
            [BUSYBOX, "--list"], capture_output=True, text=True, check=True
        ).stdout.split()
        for applet in applets:
            if applet != "busybox":
                _add_symlink(tar, f"/bin/{applet}", "busybox")
        _add_file(tar, "/usr/bin/python3.11", Path(PYTHON).read_bytes(), 0o755)
        _add_symlink(tar, "/usr/bin/python3", "python3.11")
        _add_symlink(tar, "/usr/bin/python", "python3.11")
        _add_file(
            tar, "/etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"
        )
        _add_file(tar, "/etc/group", b"root:x:0:\nnogroup:x:65534:\n")

        def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
            parts = Path(info.name).parts
            if len(parts) > 3 and (parts[3] in STDLIB_SKIP or parts[3].startswith("config-")):
                return None
            if info.issym() and info.name.endswith("sitecustomize.py"):
                return None  # Debian's points into /etc/python3.11, which the image lacks
            return info

        tar.add(PY_STDLIB, arcname=PY_STDLIB.lstrip("/"), filter=keep)
        dynload = [str(p) for p in Path(PY_STDLIB, "lib-dynload").glob("*.so")]
        router = _router_files()
        for name, path in sorted(router.items()):
            tar.add(str(path), arcname=name.lstrip("/"), recursive=False)  # keeps mtimes: .pyc stay valid
        extensions = [str(p) for p in router.values() if p.suffix == ".so"]
        added = set()
        for lib in sorted(_shared_libs([PYTHON, *dynload, *extensions])):
            # Place each lib under its resolved directory (merged /usr), named as the loader asks.
            dest = os.path.join(os.path.realpath(os.path.dirname(lib)), os.path.basename(lib))
            if dest not in added and os.path.exists(lib) and not dest.startswith(PY_STDLIB):
                added.add(dest)
                _add_file(tar, dest, Path(os.path.realpath(lib)).read_bytes(), 0o755)
        for name, content in _standin_files().items():
            _add_file(tar, name, content)


def engine_archive() -> tuple[Path, str]:
    """(path, image id) of the cached `docker load` archive of the stand-in engine: one layer (the
    rootfs) and a fixed config, so every engine that loads it holds the same image id without a
    `docker save` from another node. Built once per host and input set."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    path = CACHE_DIR / f"engine-{_rootfs_key()}.tar"
    with open(CACHE_DIR / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            with tempfile.TemporaryDirectory(dir=CACHE_DIR) as tmp:
                _write_rootfs(Path(tmp, "layer.tar"))
                _write_archive(Path(tmp, "layer.tar"), Path(tmp, "image.tar"))
                Path(tmp, "image.tar").replace(path)
    with tarfile.open(path) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
    return path, "sha256:" + manifest[0]["Config"].removesuffix(".json")


def _write_archive(
    layer: Path, dest: Path, image_config: dict | None = None, what: str = "stand-in engine"
) -> None:
    """A docker-save style archive (manifest.json, config, one layer.tar), untagged."""
    digest = hashlib.sha256()
    with open(layer, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    config = {
        "architecture": arch,
        "os": "linux",
        "created": created,
        "config": IMAGE_CONFIG if image_config is None else image_config,
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + digest.hexdigest()]},
        "history": [{"created": created, "created_by": f"sparkctl testbed: {what} rootfs"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": None, "Layers": ["rootfs/layer.tar"]}]
    with tarfile.open(dest, "w") as tar:
        _add_file(tar, "manifest.json", json.dumps(manifest).encode())
        _add_file(tar, config_name, config_bytes)
        _add_dir(tar, "rootfs")
        tar.add(str(layer), arcname="rootfs/layer.tar")


def _build(client: docker.DockerClient, dockerfile: str, files: dict[str, int], tag: str) -> str:
    """docker build from a context of random files (name -> size in bytes); returns the image id."""
    with tempfile.TemporaryFile(dir=CACHE_DIR) as ctx:
        with tarfile.open(fileobj=ctx, mode="w") as tar:
            _add_file(tar, "Dockerfile", dockerfile.encode())
            for name, size in files.items():
                info = tarfile.TarInfo(name)
                info.size = size
                tar.addfile(info, _RandomReader(size))
        ctx.seek(0)
        image, _ = client.images.build(fileobj=ctx, custom_context=True, tag=tag, rm=True, forcerm=True)
    return image.id


class _RandomReader(io.RawIOBase):
    """Incompressible bytes, streamed (a large pad never sits in memory)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        return os.urandom(n)


def build_engine_image(client: docker.DockerClient, tag: str = ENGINE_TAG, pad_mb: int = 0) -> str:
    """Load the stand-in engine into this engine as `tag`; pad_mb adds a random layer. Returns the id
    (without pad_mb the same on every engine)."""
    repo, _, version = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
    base_tag = f"{repo}:{version}" if not pad_mb else f"{repo}-base:{version}"
    path, image_id = engine_archive()
    with open(path, "rb") as fh:
        client.api.load_image(fh, quiet=True)
    client.api.tag(image_id, base_tag.rsplit(":", 1)[0], base_tag.rsplit(":", 1)[1])
    if not pad_mb:
        return image_id
    return _build(client, f"FROM {base_tag}\nCOPY pad.bin /opt/pad/pad.bin\n", {"pad.bin": pad_mb << 20}, tag)


def router_version() -> str:
    """The sglang-router version the images carry (this host's installed one)."""
    return importlib.metadata.version(ROUTER_DIST)


def build_router_image(client: docker.DockerClient, tag: str = ROUTER_TAG, base: str = ENGINE_TAG) -> str:
    """The router as its own image: the engine image (already in this engine) with the router as
    its command, sharing every layer with it. Returns the image id."""
    dockerfile = (
        f"FROM {base}\n"
        'CMD ["python3", "-m", "sglang_router.launch_router"]\n'
        f"LABEL org.sparkctl.router.version={router_version()}\n"
    )
    return _build(client, dockerfile, {}, tag)


def build_overlay_image(client: docker.DockerClient, base: str, tag: str, extra_kb: int = 64) -> str:
    """`FROM base` plus one small random layer (for layer-level shipping tests). Returns the id."""
    name = f"extra-{os.urandom(4).hex()}.bin"
    return _build(client, f"FROM {base}\nCOPY {name} /opt/extra/{name}\n", {name: extra_kb << 10}, tag)


def image_layers(client: docker.DockerClient, ref: str) -> list[str]:
    """The image's layer diff ids (rootfs order)."""
    with contextlib.suppress(KeyError):
        return list(client.images.get(ref).attrs["RootFS"]["Layers"])
    return []


def build_image_with_files(client: docker.DockerClient, base: str, tag: str, files: dict[str, bytes]) -> str:
    """`FROM base` plus the given executable files (image path -> content). Returns the image id."""
    with tempfile.TemporaryFile(dir=CACHE_DIR) as ctx:
        with tarfile.open(fileobj=ctx, mode="w") as tar:
            lines = [f"FROM {base}"]
            for i, (path, content) in enumerate(files.items()):
                _add_file(tar, f"f{i}", content, 0o755)
                lines.append(f"COPY f{i} {path}")
            _add_file(tar, "Dockerfile", ("\n".join(lines) + "\n").encode())
        ctx.seek(0)
        image, _ = client.images.build(fileobj=ctx, custom_context=True, tag=tag, rm=True, forcerm=True)
    return image.id


# The entrypoint shapes of the images users pull, over the stand-in engine (issue 46): the launcher
# as ENTRYPOINT (vllm/vllm-openai's `vllm serve`), a script that execs its arguments
# (nvcr.io/nvidia/*'s nvidia_entrypoint.sh, after its banner), none (lmsysorg/sglang: CMD only).
ENTRY_SCRIPT = b'#!/bin/sh\necho "== stand-in NVIDIA container banner =="\nexec "$@"\n'
SHAPES = {
    "launcher": 'ENTRYPOINT ["python3", "-m", "sglang.launch_server"]\nCMD []\n',
    "script": 'COPY entry.sh /opt/entry.sh\nENTRYPOINT ["/opt/entry.sh"]\nCMD ["/bin/sh"]\n',
    "none": 'CMD ["/bin/sh"]\n',
}


def build_shape_image(client: docker.DockerClient, shape: str, base: str = ENGINE_TAG) -> str:
    """The stand-in engine with one of SHAPES' entrypoints, tagged sparkctl-test/shape-<shape>."""
    tag = f"sparkctl-test/shape-{shape}:latest"
    with tempfile.TemporaryFile(dir=CACHE_DIR) as ctx:
        with tarfile.open(fileobj=ctx, mode="w") as tar:
            _add_file(tar, "entry.sh", ENTRY_SCRIPT, 0o755)
            _add_file(tar, "Dockerfile", f"FROM {base}\n{SHAPES[shape]}".encode())
        ctx.seek(0)
        client.images.build(fileobj=ctx, custom_context=True, tag=tag, rm=True, forcerm=True)
    return tag
