"""What a diagnostics bundle must never hold: the profile's secret values (raw, escaped, base64)
and anything shaped like a key or token. Every member passes through `Masker.text` before it is
written (bundle.py), so a section that forgot to mask still cannot leak."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable

from sparkctl.secrets import MASK, mask_forms

# Shapes of credentials a log or a node's output may carry whatever the profile says: Hugging Face,
# OpenAI-style and GitHub tokens, AWS key ids, JWTs, PEM private keys, a bearer header, and a
# `key=value` whose key names a secret.
TOKEN_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
    re.compile(r"\bhf_[A-Za-z0-9]{16,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(
        r"(?i)((?:api[_-]?key|token|secret|password|passwd|credential)s?[\"']?\s*[:=]\s*[\"']?)"
        r"(?!\*\*\*)[^\s\"',}]{4,}"
    ),
)


def base64_forms(value: str) -> set[str]:
    """The text base64 gives `value` wherever it starts in the encoded data: the whole encoding
    (padded and not, standard and URL-safe) and, for each of the 3 byte alignments, the part of the
    encoding that depends on `value` alone (what a base64 blob holding it contains)."""
    raw = value.encode()
    out: set[str] = set()
    for enc in (base64.b64encode, base64.urlsafe_b64encode):
        whole = enc(raw).decode()
        out |= {whole, whole.rstrip("=")}
        for shift in range(3):
            text = enc(b"\0" * shift + raw + b"\0\0").decode()
            start = -(-shift * 4 // 3)  # chars touched by the leading filler
            stop = (shift + len(raw)) * 4 // 3  # chars wholly made of value bits
            if stop - start >= 6:
                out.add(text[start:stop])
    return out


class Masker:
    """Masks the given secret values (every form a log or an encoder gives them) and token shapes."""

    def __init__(self, values: Iterable[str]) -> None:
        values = [v for v in values if v]
        forms: set[str] = set()
        long, self._short = mask_forms(values)
        forms |= set(long)
        for v in values:
            if len(v) >= 6:
                forms |= base64_forms(v)
        self._forms = sorted(forms, key=len, reverse=True)

    def text(self, text: str) -> str:
        for form in self._forms:
            text = text.replace(form, MASK)
        for form in self._short:
            text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(form)}(?![A-Za-z0-9])", MASK, text)
        for pattern in TOKEN_PATTERNS:
            text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + MASK, text)
        return text
