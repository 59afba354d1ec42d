"""vLLM's `--speculative-config` JSON: its methods, the offline check, and the draft's memory.

vLLM (vllm/config/speculative.py, `SpeculativeMethod`) takes one JSON object; argparse sees a
string, so a wrong method or a draft method without its model is caught only when the engine
builds its config (in the image: `VllmFlags`). Checked here too, offline. DFlash and DSpark drafts
keep KV of their own per target token (`kv_cache_dtype` in the JSON, else the target's); an MTP
method reuses the target's own layers (no draft weights here).
"""

from __future__ import annotations

import difflib
import json

from sparkctl.findings import Finding, Severity

CHECK = "VllmSpeculative"
# vllm/config/speculative.py: SpeculativeMethod (its MTP model types: any "<model>_mtp" or "mtp")
METHODS = frozenset(
    {"ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
     "extract_hidden_states", "dflash", "ngram_gpu", "dspark", "mtp"}
)  # fmt: skip
DRAFT_KV = frozenset({"dflash", "dspark"})  # a KV pool of the draft's own layers
NEEDS_MODEL = frozenset({"dflash", "dspark", "eagle", "eagle3", "medusa", "mlp_speculator", "draft_model"})


def parse(argv: list[str]) -> dict | str | None:
    """The JSON of --speculative-config (None: not set; a str: why it is not a JSON object)."""
    for i, word in enumerate(argv):
        value = argv[i + 1] if word == "--speculative-config" and i + 1 < len(argv) else None
        if word.startswith("--speculative-config="):
            value = word.partition("=")[2]
        if value is not None:
            try:
                doc = json.loads(value)
            except json.JSONDecodeError as exc:
                return f"not JSON ({exc.msg} at {exc.pos})"
            return doc if isinstance(doc, dict) else "not a JSON object"
    return None


def is_method(name: str) -> bool:
    return name in METHODS or name.endswith("_mtp")


def findings(argv: list[str]) -> list[Finding]:
    doc = parse(argv)
    if doc is None:
        return []
    fix = "fix engine.args speculative-config (vLLM: vllm/config/speculative.py SpeculativeConfig)"
    if isinstance(doc, str):
        return [Finding(CHECK, Severity.ERROR, f"--speculative-config is {doc}", fix=fix)]
    out: list[Finding] = []
    method = str(doc.get("method") or "")
    if method and not is_method(method):
        near = difflib.get_close_matches(method, sorted(METHODS), n=1)
        out.append(
            Finding(
                CHECK,
                Severity.ERROR,
                f"--speculative-config method {method!r} is not one of vLLM's ({', '.join(sorted(METHODS))}, <model>_mtp)",
                fix=f'"method": "{near[0]}"' if near else fix,
            )
        )
    if method in NEEDS_MODEL and not doc.get("model"):
        out.append(
            Finding(
                CHECK,
                Severity.ERROR,
                f'--speculative-config method {method!r} needs a draft "model"',
                fix="set model.draft in the profile",
            )
        )
    n = doc.get("num_speculative_tokens")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n <= 0):
        out.append(
            Finding(
                CHECK,
                Severity.ERROR,
                f"--speculative-config num_speculative_tokens {n!r} must be a positive integer",
                fix=fix,
            )
        )
    return out


def reuses_target(doc: dict) -> bool:
    """MTP reuses the target's own layers: no separate draft weights (vllm/config/speculative.py)."""
    method = str(doc.get("method") or "")
    return method == "mtp" or method.endswith("_mtp")


def draft_kv_bytes_per_token(doc: dict, draft_config: dict | None, tp: int, target_kv_bytes: int) -> int:
    """Per GPU: the DFlash/DSpark draft's own layers x KV heads per rank x (K + V) x its KV dtype."""
    if str(doc.get("method")) not in DRAFT_KV or not draft_config:
        return 0
    text = draft_config.get("text_config", draft_config)
    layers, heads = text.get("num_hidden_layers"), text.get("num_attention_heads")
    if not layers or not heads:
        return 0
    kv_heads = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim") or text.get("hidden_size", 0) // heads
    dtype = str(doc.get("kv_cache_dtype") or "auto")
    size = 1 if dtype.startswith("fp8") else (target_kv_bytes if dtype == "auto" else 2)
    return 2 * layers * max(1, kv_heads // tp) * head_dim * size
