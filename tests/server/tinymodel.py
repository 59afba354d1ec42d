"""Build a tiny Qwen3 chat model on disk, in a Hugging Face cache layout, for `transformers serve`.

Nothing is downloaded: the BPE tokenizer is trained here with `tokenizers`, the weights are random
(seeded), and the files are laid out as `hub/models--<org>--<name>/{blobs,refs,snapshots}` because
`transformers serve` lists `/v1/models` by scanning that cache.

Run as a script to build one by hand: `python tests/server/tinymodel.py /tmp/hf`.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

REPO_ID = "sparkctl-test/tiny-qwen3"
REVISION = "0" * 40  # a fixed "commit" so the snapshot path is stable

# Qwen3's real token strings: the server's response parser keys off these to split
# thinking, tool calls and content.
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

# A Qwen3-style template: system/user/assistant/tool roles, tool schemas, tool calls in
# history, reasoning in history, and `enable_thinking=false` closing an empty think block.
CHAT_TEMPLATE = (
    # transformers renders with trim_blocks, so a newline right after a block tag is written
    # {{ '\\n' }}: every newline here is meaningful (the server's parser anchors on them).
    "{% set sys = messages[0].content if messages and messages[0].role == 'system' else none %}"
    "{% if tools %}<|im_start|>system\n{% if sys %}{{ sys }}\n\n{% endif %}# Tools\n\n<tools>"
    "{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}{{ '\\n' }}</tools>\n\n"
    "Call a tool by writing its name and JSON arguments inside tool-call tags.<|im_end|>\n"
    "{% elif sys %}<|im_start|>system\n{{ sys }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'system' and loop.first %}"
    "{% elif m.role == 'system' or m.role == 'user' %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n"
    "{% if m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n{% endif %}"
    "{{ m.content or '' }}"
    "{% for tc in m.tool_calls or [] %}{% set f = tc.function if tc.function else tc %}"
    '{{ \'\\n\' }}<tool_call>\n{"name": "{{ f.name }}", "arguments": {{ f.arguments | tojson }}}\n</tool_call>'
    "{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)

_CORPUS = """
The quick brown fox jumps over the lazy dog. A tiny model answers questions about the weather.
def fibonacci(n):
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)
for i in range(10): print(i, fibonacci(i))
class Server:
    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}
{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
Once upon a time, in a valley between two mountains, there lived a clockmaker who
repaired every clock in the village. Write a short story. Explain your reasoning step by step.
system user assistant tool You are a helpful assistant. Answer in one word. What is two plus two?
alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa
quebec romeo sierra tango uniform victor whiskey xray yankee zulu
"""


def _train_tokenizer(vocab_size: int = 800):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([_CORPUS] * 20 + [CHAT_TEMPLATE], trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=[],
    )
    fast.add_tokens(ADDED, special_tokens=False)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build(cache_root: Path, seed: int = 0) -> str:
    """Write the model under `<cache_root>/hub` (use `cache_root` as HF_HOME). Returns the repo id."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    tok = _train_tokenizer()
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    pad = tok.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=8192,
        tie_word_embeddings=False,  # tied + random weights makes greedy decoding echo the last token
        eos_token_id=eos,
        pad_token_id=pad,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).to(torch.float32).eval()
    model.generation_config = GenerationConfig(eos_token_id=[eos, pad], pad_token_id=pad, do_sample=False)

    repo_dir = cache_root / "hub" / ("models--" + REPO_ID.replace("/", "--"))
    staging = repo_dir / "staging"
    model.save_pretrained(staging, safe_serialization=True)
    tok.save_pretrained(staging)

    # Content-addressed blobs + snapshot symlinks, as huggingface_hub lays them out.
    blobs = repo_dir / "blobs"
    snap = repo_dir / "snapshots" / REVISION
    blobs.mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True, exist_ok=True)
    for f in sorted(staging.iterdir()):
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        blob = blobs / digest
        f.replace(blob)
        link = snap / f.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(Path("../../blobs") / digest)
    staging.rmdir()
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(REVISION)
    return REPO_ID


def describe(cache_root: Path) -> dict:
    snap = cache_root / "hub" / ("models--" + REPO_ID.replace("/", "--")) / "snapshots" / REVISION
    return json.loads((snap / "config.json").read_text())


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/sparkctl-hf")
    print(build(root), "->", root)
