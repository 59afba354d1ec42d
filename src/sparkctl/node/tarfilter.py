"""Drop layer blobs the peer already has from a `docker save` stream, on the fly (pure, no I/O).

`docker load` unpacks a layer only when the engine lacks its chain ID; for a layer it already has
it never opens the layer file (verified on Docker 20.10: a stream without those files loads and
yields the same image ID). So an image that differs from one on the peer by a small overlay costs
about the overlay on the wire.

Two save formats exist:
- OCI layout (Docker >= 25): layers are ``blobs/sha256/<diff id>``: the name says which layer it is.
- legacy (Docker <= 24): layers are ``<v1 id>/layer.tar``. The v1 id of layer i is a hash over
  a fixed "intermediate layer" JSON, the chain id and the parent's v1 id. The first intermediate
  ``<v1 id>/json`` in the stream gives that JSON; we predict every v1 id from it and keep a
  prediction only if it reproduces the id the engine wrote (else nothing is skipped: still correct).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator

BLOCK = 512
_CHUNK = 1 << 20


def chain_ids(diff_ids: list[str]) -> list[str]:
    """Docker layer chain ids: chain[0] = diff[0], chain[i] = sha256(chain[i-1] + " " + diff[i])."""
    out: list[str] = []
    for diff in diff_ids:
        out.append(diff if not out else "sha256:" + hashlib.sha256(f"{out[-1]} {diff}".encode()).hexdigest())
    return out


def _go_map_json(obj: dict) -> str:
    """json.Marshal of a Go map[string]RawMessage: top-level keys sorted, values kept compact."""
    return (
        "{"
        + ",".join(json.dumps(k) + ":" + json.dumps(obj[k], separators=(",", ":")) for k in sorted(obj))
        + "}"
    )


def predict_v1_ids(template: dict, diff_ids: list[str]) -> dict[str, int]:
    """v1 id hex -> layer index for every layer but the top one (which embeds the image config)."""
    out: dict[str, int] = {}
    parent = ""
    for i, chain in enumerate(chain_ids(diff_ids)[:-1]):
        cfg = dict(template, layer_id=chain)
        if parent:
            cfg["parent"] = parent
        v1 = hashlib.sha256(_go_map_json(cfg).encode()).hexdigest()
        out[v1] = i
        parent = "sha256:" + v1
    return out


def _parse_octal(field: bytes) -> int:
    if field and field[0] & 0x80:  # base-256 (GNU) for sizes >= 8 GiB
        return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
    text = field.split(b"\0", 1)[0].strip() or b"0"
    return int(text, 8)


def _pax_path(data: bytes) -> str | None:
    pos = 0
    while pos < len(data):
        space = data.index(b" ", pos)
        length = int(data[pos:space])
        key, _, value = data[space + 1 : pos + length - 1].partition(b"=")
        if key == b"path":
            return value.decode()
        pos += length
    return None


class LayerFilter:
    """Feed `docker save` bytes in, get the same tar minus the layers at `skip` indices out."""

    def __init__(self, diff_ids: list[str], skip: set[int]) -> None:
        self.diff_ids = diff_ids
        self.skip = skip
        self.skip_digests = {diff_ids[i] for i in skip}
        self.v1_index: dict[str, int] | None = None
        self.top_v1: str | None = None
        self.skipped_bytes = 0
        self.skipped_layers: list[int] = []

    # -- decisions -------------------------------------------------------------------------
    def _learn(self, name: str, data: bytes) -> None:
        """A legacy ``<v1 id>/json`` member: learn the intermediate template, or note the top layer."""
        v1 = name.split("/", 1)[0]
        try:
            doc = json.loads(data)
        except ValueError:
            return
        if "config" in doc:  # only the top layer carries the image config
            self.top_v1 = v1
            return
        if self.v1_index is not None:
            return
        base = {k: v for k, v in doc.items() if k not in ("id", "parent")}
        # Engines differ on whether "os" is set before or after hashing: try both, keep the match.
        for template in (base, {k: v for k, v in base.items() if k != "os"}):
            predicted = predict_v1_ids(template, self.diff_ids)
            if v1 in predicted:
                self.v1_index = predicted
                return
        self.v1_index = {}  # unknown engine variant: skip nothing (correct, just not minimal)

    def _layer_index(self, name: str) -> int | None:
        if name.startswith("blobs/sha256/"):
            digest = "sha256:" + name.rsplit("/", 1)[1]
            return self.diff_ids.index(digest) if digest in self.skip_digests else None
        if name.endswith("/layer.tar") and name.count("/") == 1:
            v1 = name.split("/", 1)[0]
            if v1 == self.top_v1:
                return len(self.diff_ids) - 1
            return (self.v1_index or {}).get(v1)
        return None

    def _drop(self, name: str) -> bool:
        index = self._layer_index(name)
        return index is not None and index in self.skip

    # -- the stream ------------------------------------------------------------------------
    def filter(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        reader = _Blocks(chunks)
        pending: list[bytes] = []  # pax / GNU long-name headers that belong to the next member
        pending_name: str | None = None
        while True:
            header = reader.read(BLOCK)
            if len(header) < BLOCK:
                if header:
                    yield header
                break
            if header == b"\0" * BLOCK:
                yield from pending
                yield header
                yield from reader.rest()
                return
            size = _parse_octal(header[124:136])
            kind = header[156:157]
            padded = (size + BLOCK - 1) // BLOCK * BLOCK
            if kind in (b"x", b"L"):
                data = reader.read(padded)
                pending.append(header + data)
                if kind == b"x":
                    pending_name = _pax_path(data[:size]) or pending_name
                else:
                    pending_name = data[:size].rstrip(b"\0").decode()
                continue
            name = pending_name or _header_name(header)
            pending_name = None
            if kind in (b"0", b"\0") and name.endswith("/json") and size <= (1 << 20):
                data = reader.read(padded)
                self._learn(name, data[:size])
                yield from pending
                yield header + data
            elif kind in (b"0", b"\0") and self._drop(name):
                self.skipped_bytes += size
                self.skipped_layers.append(self._layer_index(name) or 0)
                for _ in reader.skip(padded):
                    pass
            else:
                yield from pending
                yield header
                yield from reader.stream(padded)
            pending = []


def _header_name(header: bytes) -> str:
    name = header[0:100].split(b"\0", 1)[0].decode()
    if header[257:262] == b"ustar":
        prefix = header[345:500].split(b"\0", 1)[0].decode()
        if prefix:
            name = f"{prefix}/{name}"
    return name


class _Blocks:
    """Byte-exact reads over an iterator of chunks, without copying big payloads twice."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._it = iter(chunks)
        self._buf = b""

    def _fill(self) -> bool:
        for chunk in self._it:
            if chunk:
                self._buf = self._buf + chunk if self._buf else bytes(chunk)
                return True
        return False

    def read(self, n: int) -> bytes:
        while len(self._buf) < n and self._fill():
            pass
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def stream(self, n: int) -> Iterator[bytes]:
        """Yield exactly n bytes in pieces of up to ~1 MiB."""
        while n > 0:
            if not self._buf and not self._fill():
                return
            take = min(n, len(self._buf), _CHUNK) if len(self._buf) > _CHUNK else min(n, len(self._buf))
            out = self._buf[:take]
            self._buf = self._buf[take:]
            n -= take
            yield out

    def skip(self, n: int) -> Iterator[None]:
        for _ in self.stream(n):
            yield None

    def rest(self) -> Iterator[bytes]:
        if self._buf:
            yield self._buf
            self._buf = b""
        yield from self._it
