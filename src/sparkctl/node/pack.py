"""The packer: the node program's files as one `python3 -c PROGRAM OP ARGS` (stdlib only).

FILES is the one list of what the program is made of, in order (a later file uses the names of the
earlier ones); each file's own imports of its siblings are marked `# node: strip` and dropped.
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from functools import cache
from pathlib import Path

FILES: tuple[str, ...] = (
    "tarfilter.py",
    "base.py",
    "stream_in.py",
    "recv.py",
    "relay.py",
    "docker_api.py",
    "load.py",
    "children.py",
    "push_image.py",
    "push.py",
)


def pack(folder: Path, names: tuple[str, ...]) -> str:
    """The packer: `names` (files of `folder`, in order) as one stdlib-only script: their in-package
    imports, marked `# node: strip`, dropped; one `from __future__` line first. The guard's program
    (node/guard/) is packed by it too."""
    parts = ["from __future__ import annotations"]
    for name in names:
        skipping = False
        for line in (folder / name).read_text().splitlines():
            if line.endswith("# node: strip"):
                skipping = line.rstrip().endswith("(  # node: strip")  # a multi-line import
            elif skipping:
                skipping = line != ")"
            elif line != "from __future__ import annotations":
                parts.append(line)
    return "\n".join(parts) + "\n"


@cache
def node_script() -> str:
    """The node program: FILES packed."""
    return pack(Path(__file__).parent, FILES)


# The node's system interpreter (/usr/bin/python3, what DGX OS ships) when it has one, else python3
# on PATH; -S: no site-packages (the programs are stdlib-only). A pyenv/conda shim first on PATH
# costs ~0.1 s per start (measured), and a ship starts several.
PYTHON = [
    "/bin/sh",
    "-c",
    'if [ -x /usr/bin/python3 ]; then exec /usr/bin/python3 -S "$@"; fi; exec python3 -S "$@"',
    "python3",
]


# The program travels zlib-compressed in base64 (23 KB instead of 56 KB): base64's alphabet is plain
# for the SSH transport (no shell decoding of a 74 KB word on the node: 36 -> 34 ms of node CPU per
# op, measured) and for the node-to-node hop's encoding; unpacking costs the node < 1 ms.
# Compiling it cost ~9 ms of node CPU per op, on the critical path of every round trip: the node
# keeps the compiled code (marshal, like a __pycache__ entry) in the node user's ~/.cache/sparkctl,
# named by the program's digest and the interpreter's cache tag, written 0600 and renamed into
# place; a missing, stale or unreadable copy is simply compiled again (and older versions removed).
# Never inside a Hugging Face cache (a directory on the way up holds `hub/`, `.locks/` or a
# `models--*`/`datasets--*` repo: HF_HUB_CACHE itself), and only a copy that is a regular file of
# the user's own, 0600, checked on the opened descriptor (not the name): the serving
# container mounts that read-write, and code it could rewrite must not run on the host. Nor in a
# directory others can write or that is not the user's own.
_UNPACK = """import sys,os,marshal
_d,_z=sys.argv.pop(1),sys.argv.pop(1)
_t=os.path.realpath(os.path.join(os.path.expanduser('~'),'.cache','sparkctl'))
_p=os.path.join(_t,'node-%s.%s'%(_d,sys.implementation.cache_tag))
_a,_c=_t,None
while _p:
 try:_l=os.listdir(_a)
 except OSError:_l=[]
 if 'hub' in _l or '.locks' in _l or [_n for _n in _l if _n.startswith(('models--','datasets--'))]:_p=None
 elif os.path.dirname(_a)==_a:break
 _a=os.path.dirname(_a)
try:
 _s=os.stat(_t)
 if _s.st_uid!=os.geteuid() or _s.st_mode&0o022:_p=None
 with os.fdopen(os.open(_p,os.O_RDONLY|os.O_NOFOLLOW),'rb') as _f:
  _s=os.fstat(_f.fileno())
  if _s.st_uid!=os.geteuid() or _s.st_mode&0o077 or not (_s.st_mode&0o170000==0o100000):raise OSError
  _c=marshal.load(_f)
except Exception:pass
if _c is None:
 import base64,zlib
 _c=compile(zlib.decompress(base64.b64decode(_z)),'sparkctl-node','exec')
 if _p:
  try:
   os.makedirs(_t,0o700,exist_ok=True)
   for _n in os.listdir(_t):
    if _n.startswith('node-') and _n!=os.path.basename(_p):os.unlink(os.path.join(_t,_n))
   _w='%s.%d.part'%(_p,os.getpid())
   with os.fdopen(os.open(_w,os.O_WRONLY|os.O_CREAT|os.O_EXCL|os.O_NOFOLLOW,0o600),'wb') as _f:marshal.dump(_c,_f)
   os.replace(_w,_p)
  except OSError:pass
del _d,_z,_t,_p,_a,_l
exec(_c)"""


@cache
def packed_node_script() -> str:
    return base64.b64encode(zlib.compress(node_script().encode(), 9)).decode()


@cache
def node_script_digest() -> str:
    """Names the node's compiled copy: a new sparkctl (another program) never runs an old copy."""
    return hashlib.sha256(node_script().encode()).hexdigest()[:24]


def node_argv(op: str, *args: str) -> list[str]:
    """argv that runs one op of the node program (constant code; paths are plain arguments)."""
    return [*PYTHON, "-c", _UNPACK, node_script_digest(), packed_node_script(), op, *args]


def load_argv(codec: str | None = None) -> list[str]:
    """The peer's image loader (load.py): `docker load -q` through the engine API, no docker CLI;
    `codec` "zstd": of a stream compressed on the way (push.py `compressor`)."""
    return node_argv("load", *([codec] if codec else []))
