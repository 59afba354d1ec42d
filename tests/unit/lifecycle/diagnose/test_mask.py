"""The bundle's masking (lifecycle/diagnose/mask.py): secret values in every form, token shapes."""

from __future__ import annotations

import base64
import json

import pytest

from sparkctl.lifecycle.diagnose.mask import Masker, base64_forms

SECRET = "Zq8-canary-VALUE/with+odd'chars"


@pytest.mark.parametrize("prefix", ["", "a", "ab", "abc", "abcd"])
@pytest.mark.parametrize("enc", [base64.b64encode, base64.urlsafe_b64encode])
def test_a_value_inside_a_base64_blob_is_masked_at_every_alignment(prefix, enc):
    blob = enc(f"{prefix}{SECRET} and more".encode()).decode()
    masked = Masker([SECRET]).text(f"auth={blob}")
    assert not any(form in masked for form in base64_forms(SECRET))
    assert "***" in masked


def test_raw_repr_and_json_escaped_values_are_masked_and_the_rest_kept():
    text = f"token {SECRET} repr {SECRET!r} json {json.dumps(SECRET)} end"
    out = Masker([SECRET]).text(text)
    assert "canary" not in out
    assert out.startswith("token ***") and out.endswith(" end")


def test_a_short_value_is_masked_only_where_it_stands_alone():
    assert Masker(["ab1"]).text("ab1 tabby ab1x") == "*** tabby ab1x"


@pytest.mark.parametrize(
    "line",
    [
        "HF token hf_AbCdEfGhIjKlMnOpQrSt1234 loaded",
        "key sk-proj-AbCdEfGhIjKlMnOpQr used",
        "Authorization: Bearer abc.DEF-123_456",
        'config {"api_key": "plain-text-key"}',
        "PASSWORD=hunter2hunter2",
        "aws AKIAABCDEFGHIJKLMNOP",
        "ghp_abcdefghijklmnopqrstuvwxyz0123",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----",
    ],
)
def test_token_shapes_are_masked_without_knowing_the_value(line):
    out = Masker([]).text(line)
    assert "***" in out
    for word in (
        "AbCdEfGhIj",
        "abc.DEF",
        "plain-text-key",
        "hunter2",
        "ABCDEFGHIJ",
        "abcdefghijklmno",
        "b3Bl",
    ):
        assert word not in out


def test_ordinary_text_passes_unchanged():
    text = "NVRM: Xid 79, GPU has fallen off the bus\nMemTotal: 131072 kB\ntokenizer loaded"
    assert Masker(["unrelated-secret"]).text(text) == text
