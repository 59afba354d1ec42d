"""llama.cpp's flags module: the GGUF path in the container and the options model."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sparkctl.engines.llamacpp import flags as F


def test_the_gguf_path_is_the_hub_cache_layout() -> None:
    path = F.model_path("/root/.cache/huggingface", "org/name", "c0ffee", "sub/m-00001-of-00002.gguf")
    assert path == "/root/.cache/huggingface/hub/models--org--name/snapshots/c0ffee/sub/m-00001-of-00002.gguf"
    assert F.hub_dir("a/b-c.d") == "models--a--b-c.d"


@pytest.mark.parametrize("bad", ["/abs.gguf", "../up.gguf", "a//b.gguf", "model.bin", "a/../b.gguf"])
def test_a_gguf_file_must_stay_in_the_snapshot(bad: str) -> None:
    with pytest.raises(ValidationError, match="inside the model's snapshot"):
        F.Options(gguf_file=bad)


def test_the_key_flags_are_managed_and_the_key_file_is_a_secret_path() -> None:
    assert {"api-key", "api-key-file", "model", "host", "port"} <= set(F.MANAGED_FLAGS)
    assert F.KEY_FILE.startswith("/run/secrets/")
    import re

    argv, trace = F.LOG_SECRET_PATTERNS
    assert re.sub(argv, r"\1***", "argv: --api-key abc --port 1") == "argv: --api-key *** --port 1"
    line = "srv  init: api_keys: ****y123\n"
    assert re.sub(trace, r"\1", line) == "srv  init: api_keys: ****\n"
