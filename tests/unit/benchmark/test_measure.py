"""Reading a streamed chunk as the JSON object the server sent (benchmark/measure.py)."""

from __future__ import annotations

import pytest

from sparkctl.benchmark.measure import _has_text, _text_of, _usage


@pytest.mark.parametrize(
    ("delta", "want"),
    [
        ({"content": "hi"}, (True, False, True)),
        ({"content": "\n"}, (True, False, False)),  # a token for TTFT, nothing visible
        ({"reasoning_content": "let me think"}, (True, True, True)),  # SGLang's field
        ({"reasoning": "hmm"}, (True, True, True)),  # vLLM's field
        ({"content": "<think>"}, (True, True, True)),
        ({"tool_calls": [{"index": 0, "function": {"name": "f"}}]}, (True, False, True)),
        ({"role": "assistant", "content": ""}, (False, False, False)),
        ({"content": None, "reasoning": None}, (False, False, False)),
        ({"content": 5}, (False, False, False)),  # not a string: no text
    ],
)
def test_what_a_delta_carries(delta: dict, want: tuple[bool, bool, bool]) -> None:
    assert _text_of(delta) == want


def test_a_chunk_has_text_only_in_a_choices_delta() -> None:
    assert _has_text({"choices": [{"index": 0, "delta": {"content": "x"}}]})
    assert not _has_text({"choices": [], "usage": {"completion_tokens": 3}})
    assert not _has_text({"choices": [{"index": 0, "delta": None}]})
    assert not _has_text({"choices": "garbage"}) and not _has_text(["not", "a", "chunk"])


def test_usage_with_and_without_cached_tokens() -> None:
    got = _usage(
        {"prompt_tokens": 40, "completion_tokens": 8, "prompt_tokens_details": {"cached_tokens": 32}}
    )
    assert (got.prompt_tokens, got.completion_tokens, got.cached_tokens) == (40, 8, 32)
    assert _usage({"prompt_tokens": 40, "completion_tokens": 8}).cached_tokens is None
