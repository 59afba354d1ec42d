"""A CPU torch image for the gloo fabric test: the stand-in engine image plus the host's torch.

No registry is reachable, so the image is built from what the host has: the torch package that
`pip install torch==2.13.0` put next to the test interpreter (a cp311 CPU wheel, which the engine
image's python3.11 can load), trimmed of headers/tests/tools, plus the C++ runtime it links.
The build context is cached on the host keyed by the torch install, and the image is built on
the first lab node and copied to the others (same image id everywhere, as `sparkctl ship` would).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import io
import os
import re
import subprocess
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

from tests.testbed.images import CACHE_DIR, ENGINE_TAG

if TYPE_CHECKING:
    from tests.testbed.lab import Lab

TORCH_TAG = "sparkctl-test/torch-cpu:latest"
SITE = "/opt/torch-site"
# Parts of the torch package `import torch, torch.distributed` never loads.
TORCH_SKIP_DIRS = {"include", "test", "share"}
TORCH_KEEP_BIN = {"torch_shm_manager"}  # `import torch` checks it exists; the rest are C++ tests
TORCH_SKIP_LIBS = re.compile(r"(test|backend_with_compiler|aoti_custom_ops)")
EXTRA_MODULES = ("typing_extensions", "torchgen")  # what `import torch` needs beyond the stdlib


def _torch_dir() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise RuntimeError("torch is not installed next to the tests: pip install torch==2.13.0")
    return Path(spec.origin).parent


def _module_path(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"{name} is not installed next to the tests")
    origin = Path(spec.origin)
    return origin.parent if origin.name == "__init__.py" else origin


def _system_libs(torch_dir: Path) -> set[str]:
    """Host libraries torch's native code links that are not inside the torch package."""
    objs = [str(p) for p in (torch_dir / "lib").glob("*.so*")] + [str(p) for p in torch_dir.glob("_C*.so")]
    out = subprocess.run(["ldd", *objs], capture_output=True, text=True).stdout
    libs = set(re.findall(r"=>\s*(/\S+\.so[.\d]*)", out))
    return {lib for lib in libs if not lib.startswith(str(torch_dir))}


def _key(torch_dir: Path) -> str:
    h = hashlib.sha256(Path(__file__).read_bytes())  # what goes in is decided here
    for p in (torch_dir / "version.py", torch_dir / "lib" / "libtorch_cpu.so"):
        st = p.stat()
        h.update(f"{p}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def _write_context(path: Path, torch_dir: Path) -> None:
    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(info.name).parts  # site/torch/<top>/...
        if len(parts) > 2 and parts[2] in TORCH_SKIP_DIRS:
            return None
        if len(parts) == 4 and parts[2] == "lib" and TORCH_SKIP_LIBS.search(parts[3]):
            return None
        if len(parts) >= 4 and parts[2] == "bin" and parts[3] not in TORCH_KEEP_BIN:
            return None
        return info

    dockerfile = (
        f"FROM {ENGINE_TAG}\nCOPY site {SITE}\nCOPY syslib/ /\nENV PYTHONPATH={SITE}\n"
        'LABEL org.sparkctl.torch-cpu="1"\n'
    )
    with tarfile.open(path, "w") as tar:
        data = dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, fileobj=io.BytesIO(data))
        tar.add(torch_dir, arcname="site/torch", filter=keep)
        for name in EXTRA_MODULES:
            mod = _module_path(name)
            tar.add(mod, arcname=f"site/{mod.name}")
        for lib in sorted(_system_libs(torch_dir)):
            # Under the resolved directory (merged /usr), named as the loader asks for it.
            dest = os.path.join(os.path.realpath(os.path.dirname(lib)), os.path.basename(lib))
            tar.add(os.path.realpath(lib), arcname="syslib" + dest)


def torch_context() -> Path:
    """Cached docker build context (tar) for the torch image."""
    torch_dir = _torch_dir()
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    path = CACHE_DIR / f"torch-context-{_key(torch_dir)}.tar"
    with open(CACHE_DIR / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            _write_context(tmp, torch_dir)
            tmp.replace(path)
    return path


def install_torch_image(lab: Lab, tag: str = TORCH_TAG) -> str:
    """Build on the first node (FROM the engine image already there), load on the others."""
    first = lab.nodes[0]
    with open(torch_context(), "rb") as ctx:
        image, _ = lab.docker(first).images.build(
            fileobj=ctx, custom_context=True, tag=tag, rm=True, forcerm=True
        )
    for node in lab.nodes[1:]:
        lab.load_image(node, tag, from_node=first)
    return image.id
