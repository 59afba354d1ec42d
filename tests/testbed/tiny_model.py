"""A tiny random-weight Qwen3 in an HF-cache layout, generated here (no hub is reachable).

Real vLLM loads it like any hub model: config.json, model.safetensors (bfloat16), a BPE tokenizer
trained locally with `tokenizers` and a ChatML chat template. head_dim 32 (vLLM's CPU attention
refuses 16), 4 query / 2 KV heads (TP=2 splits both). Built once per recipe into the host's cache
and copied into each lab node's HF cache (`hub/models--<org>--<name>/{refs/main,snapshots/<commit>}`).
"""

from __future__ import annotations

import fcntl
import hashlib
import random
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from tests.testbed.images import CACHE_DIR

if TYPE_CHECKING:
    from tests.testbed.lab import Lab

MODEL_ID = "test-org/tiny-qwen3"
# A second model for the fleet tests: the same shape and tokenizer, other random weights (seed 1),
# so the same prompt gets other tokens from it.
SECOND_ID = "test-org/tiny-qwen3-b"
VOCAB = 512  # the BPE trainer's ceiling; the ASCII corpus gives ~220 tokens
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CONFIG = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
    "rope_theta": 10000.0,
}
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WORDS = [
    "the",
    "a",
    "spark",
    "node",
    "rank",
    "serves",
    "model",
    "token",
    "fabric",
    "cluster",
    "engine",
    "router",
    "request",
    "answer",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "dog",
    "one",
    "two",
    "three",
    "four",
    "five",
    "red",
    "green",
    "blue",
    "light",
    "fast",
    "slow",
    "data",
    "memory",
    "cache",
    "queue",
    "stream",
    "chat",
    "reply",
    "hello",
    "world",
    "test",
    "tiny",
    "random",
    "weights",
    "layer",
    "head",
]


def _key() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def commit() -> str:
    """The snapshot's 'commit' (pinned revision a profile can use): fixed per recipe."""
    return hashlib.sha1(_key().encode()).hexdigest()


def _corpus() -> list[str]:
    rng = random.Random(0)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 20))) for _ in range(2000)]


def _tokenizer(dest: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # Only the corpus' own (ASCII) symbols, not all 256 byte tokens: a random model samples any
    # token, and a lone byte of a multi-byte character decodes to nothing (a stream with no text).
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL)
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(dest)


def _weights(dest: Path, seed: int = 0) -> None:
    import torch
    from tokenizers import Tokenizer
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    # The model's vocabulary is exactly the tokenizer's: a sampled id always decodes to a token.
    vocab = Tokenizer.from_file(str(dest / "tokenizer.json")).get_vocab_size()
    params = {**CONFIG, "vocab_size": vocab}
    config = Qwen3Config(**params, eos_token_id=2, pad_token_id=0, bos_token_id=None)
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(dest, safe_serialization=True)


def hub_dir(model_id: str = MODEL_ID) -> Path:
    """The host's cached `hub/` tree holding the model (built on first use)."""
    seed = 0 if model_id == MODEL_ID else 1
    root = CACHE_DIR / (f"tiny-qwen3-{_key()}" if seed == 0 else f"tiny-qwen3-b-{_key()}")
    hub = root / "hub"
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / "tiny-model.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not root.exists():
            tmp = Path(tempfile.mkdtemp(dir=CACHE_DIR))
            repo = tmp / "hub" / ("models--" + model_id.replace("/", "--"))
            snap = repo / "snapshots" / commit()
            snap.mkdir(parents=True)
            _tokenizer(snap)
            _weights(snap, seed)
            (repo / "refs").mkdir()
            (repo / "refs" / "main").write_text(commit())
            tmp.chmod(0o755)
            tmp.rename(root)
    return hub


def seed_tiny_model(lab: Lab, model_id: str = MODEL_ID) -> None:
    """The model in every node's HF cache (the lab profile's model.hf_cache: <node_root>/hf)."""
    src = hub_dir(model_id)
    for node in lab.nodes:
        shutil.copytree(src, Path(node.node_root, "hf", "hub"), dirs_exist_ok=True)
