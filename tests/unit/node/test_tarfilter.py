"""LayerFilter: drop layer blobs the peer has from a `docker save` stream, keep everything else."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile

import pytest

from sparkctl.node.tarfilter import LayerFilter, _parse_octal, chain_ids, predict_v1_ids

# Recorded from a real Docker 20.10 `docker save` of a 3-layer image (tests/testbed overlays).
REAL_DIFFS = [
    "sha256:a124c8ca4e2c5c8eb0b092687bf8c013c90ef2fd313095fdfce078a9d1ce0718",
    "sha256:92daf3f5e22e8d1cb08f12b728afba2b3ecf3ac0f42d40080eb890245f820336",
    "sha256:6b8fed58b483bbc76666bfdcb3aaa7cb3e838f92b58016d0b5dded4f5d62a0a1",
]
REAL_V1 = [
    "4a5e5d42cad50d6d87f9e4604a4ac1936c9db3e77e89689a47ab9f2cabeb6e3b",
    "adc04b0f4548d3c59783147a8c118aed54c5f33a345a8fe9018ed0b1f5b8fd45",
]
CONTAINER_CONFIG = json.loads(
    '{"Hostname":"","Domainname":"","User":"","AttachStdin":false,"AttachStdout":false,'
    '"AttachStderr":false,"Tty":false,"OpenStdin":false,"StdinOnce":false,"Env":null,"Cmd":null,'
    '"Image":"","Volumes":null,"WorkingDir":"","Entrypoint":null,"OnBuild":null,"Labels":null}'
)
# What Docker 20.10 writes as <v1 id>/json for an intermediate layer ("os" is set after hashing).
INTERMEDIATE = {"created": "1970-01-01T00:00:00Z", "container_config": CONTAINER_CONFIG, "os": "linux"}


def test_v1_ids_match_a_real_engine() -> None:
    template = {k: v for k, v in INTERMEDIATE.items() if k != "os"}
    assert predict_v1_ids(template, REAL_DIFFS) == {REAL_V1[0]: 0, REAL_V1[1]: 1}


def test_chain_ids() -> None:
    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    assert chain_ids([a, b]) == [a, "sha256:" + hashlib.sha256(f"{a} {b}".encode()).hexdigest()]


def test_base256_size() -> None:
    field = bytes([0x80]) + (9 << 30).to_bytes(11, "big")
    assert _parse_octal(field) == 9 << 30
    assert _parse_octal(b"00000001750\0") == 1000


def _add(tar: tarfile.TarFile, name: str, data: bytes, **pax: str) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    if pax:
        info.pax_headers = dict(pax)
    tar.addfile(info, io.BytesIO(data))


def _legacy_save(
    layers: list[bytes], top_first: bool = False, template: dict | None = None
) -> tuple[bytes, list]:
    """A legacy (Docker <= 24) save stream: members sorted by name like the engine's archive.Tar."""
    diffs = ["sha256:" + hashlib.sha256(data).hexdigest() for data in layers]
    tmpl = template if template is not None else {k: v for k, v in INTERMEDIATE.items() if k != "os"}
    ids = sorted(predict_v1_ids(tmpl, diffs), key=lambda v: predict_v1_ids(tmpl, diffs)[v])
    top = ("0" if top_first else "f") * 64
    ids.append(top)
    members: dict[str, bytes] = {}
    for i, v1 in enumerate(ids):
        doc = dict(INTERMEDIATE, id=v1) if i < len(ids) - 1 else {"id": v1, "config": {"Cmd": ["sh"]}}
        if i:
            doc["parent"] = ids[i - 1]
        members[f"{v1}/VERSION"] = b"1.0"
        members[f"{v1}/json"] = json.dumps(doc).encode()
        members[f"{v1}/layer.tar"] = layers[i]
    members["c" * 64 + ".json"] = json.dumps({"rootfs": {"diff_ids": diffs}}).encode()
    members["manifest.json"] = json.dumps([{"Layers": [f"{v}/layer.tar" for v in ids]}]).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(members):
            _add(tar, name, members[name])
    return buf.getvalue(), list(zip(ids, diffs, strict=True))


def _filtered(data: bytes, f: LayerFilter, chunk: int = 1000) -> dict[str, bytes]:
    out = b"".join(f.filter(data[i : i + chunk] for i in range(0, len(data), chunk)))
    with tarfile.open(fileobj=io.BytesIO(out)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}


@pytest.mark.parametrize("top_first", [False, True])
def test_legacy_stream_drops_only_the_layers_the_peer_has(top_first: bool) -> None:
    layers = [os.urandom(5000), os.urandom(3000), os.urandom(700)]
    data, ids = _legacy_save(layers, top_first=top_first)
    f = LayerFilter([d for _, d in ids], skip={0, 1})
    got = _filtered(data, f)
    assert f"{ids[0][0]}/layer.tar" not in got and f"{ids[1][0]}/layer.tar" not in got
    assert got[f"{ids[2][0]}/layer.tar"] == layers[2]
    assert "manifest.json" in got and all(f"{v}/json" in got for v, _ in ids)
    assert f.skipped_bytes == 8000 and sorted(f.skipped_layers) == [0, 1]


def test_nothing_to_skip_is_byte_identical() -> None:
    data, ids = _legacy_save([os.urandom(2000), os.urandom(100)])
    f = LayerFilter([d for _, d in ids], skip=set())
    assert b"".join(f.filter([data])) == data


def test_unknown_engine_json_skips_nothing() -> None:
    other = dict({k: v for k, v in INTERMEDIATE.items() if k != "os"}, comment="engine X")
    data, ids = _legacy_save([os.urandom(2000), os.urandom(100)], template=other)
    # The stream's json carries INTERMEDIATE, whose hash cannot reproduce ids made from `other`.
    f = LayerFilter([d for _, d in ids], skip={0})
    got = _filtered(data, f)
    assert f.skipped_bytes == 0 and f"{ids[0][0]}/layer.tar" in got


def test_oci_layout_drops_blobs_by_diff_id_even_after_pax_headers() -> None:
    layers = [os.urandom(4000), os.urandom(900)]
    diffs = ["sha256:" + hashlib.sha256(x).hexdigest() for x in layers]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, "blobs/sha256/" + diffs[0][7:], layers[0], comment="forces a pax header")
        _add(tar, "blobs/sha256/" + diffs[1][7:], layers[1])
        _add(tar, "index.json", b"{}")
        _add(tar, "manifest.json", b"[]")
    f = LayerFilter(diffs, skip={0})
    got = _filtered(buf.getvalue(), f, chunk=333)
    assert set(got) == {"blobs/sha256/" + diffs[1][7:], "index.json", "manifest.json"}
    assert f.skipped_bytes == 4000
