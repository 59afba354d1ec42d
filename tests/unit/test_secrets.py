"""secrets.resolve, the one secret resolver: this shell's variable, a file on the node behind a
connection (read once per run), a file on this machine (verify/bench); resolve_known tolerates
what cannot be read; the masks and the container files are read through it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl import secrets
from sparkctl.errors import UsageError
from sparkctl.secrets import SecretFile, SecretRef, local_ref, render_files, resolve, resolve_known


class _Conn:
    """A node that holds files; counts reads."""

    def __init__(self, node: str, files: dict[str, bytes]) -> None:
        self.node, self.files, self.reads = node, files, 0

    def get(self, path: str) -> bytes:
        self.reads += 1
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path]


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(secrets, "_FILE_VALUES", {})


def test_a_variable_is_read_from_this_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    ref = SecretRef("HF_TOKEN", env="MY_TOKEN")
    monkeypatch.setenv("MY_TOKEN", "hf_x")
    assert resolve(ref) == "hf_x"
    monkeypatch.delenv("MY_TOKEN")
    with pytest.raises(UsageError, match=r"\$MY_TOKEN, which is not set") as err:
        resolve(ref)
    assert "export MY_TOKEN" in (err.value.fix or "")
    assert resolve_known(ref) is None and resolve_known(None) is None


def test_a_node_file_is_read_once_per_run_and_known_after() -> None:
    ref = SecretRef("api-key", file="/etc/key", node="spark1")
    assert resolve_known(ref) is None  # not read yet, and no connection to read it
    with pytest.raises(UsageError, match="no connection to read it from"):
        resolve(ref)
    conn = _Conn("spark1", {"/etc/key": b"sk-1\n"})
    assert resolve(ref, conn) == "sk-1" and resolve(ref, conn) == "sk-1" and conn.reads == 1
    assert resolve_known(ref) == "sk-1"  # readiness' probe: no I/O, the value read earlier


def test_a_missing_or_empty_node_file_names_the_node() -> None:
    with pytest.raises(UsageError, match="cannot read secret api-key from /etc/key") as err:
        resolve(SecretRef("api-key", file="/etc/key", node="spark2"), _Conn("spark2", {}))
    assert err.value.node == "spark2" and "0400" in (err.value.fix or "")
    with pytest.raises(UsageError, match="is empty"):
        resolve(SecretRef("api-key", file="/e", node="spark2"), _Conn("spark2", {"/e": b" \n"}))


def test_the_profiles_secret_is_read_on_this_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkctl.profile.schema import Secret

    key = tmp_path / "key"
    key.write_text("sk-here\n")
    assert resolve_known(local_ref("api-key", Secret(file=str(key)))) == "sk-here"
    assert resolve_known(local_ref("api-key", Secret(file=str(tmp_path / "absent")))) is None
    monkeypatch.setenv("K", "sk-env")
    assert resolve_known(local_ref("api-key", Secret(env="K"))) == "sk-env"
    assert local_ref("api-key", None) is None


def test_container_files_and_masks_read_through_the_resolver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K", 'sk-"q')
    conn = _Conn("spark1", {"/t": b"hf_file"})
    files = [
        SecretFile("/run/secrets/keys.yaml", SecretRef("api-key", env="K"), "api-key"),
        SecretFile("/run/secrets/HF_TOKEN", SecretRef("HF_TOKEN", file="/t", node="spark1"), bind=True),
    ]
    assert render_files(files, conn) == {"/run/secrets/keys.yaml": b'api-key: "sk-\\"q"\n'}
    refs = [f.ref for f in files] + [SecretRef("gone", env="UNSET_X")]
    assert secrets.secret_values(refs, conn) == ['sk-"q', "hf_file"]
