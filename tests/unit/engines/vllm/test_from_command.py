"""vLLM's launch-line reader: `vllm serve MODEL` lines as docs/engines.md and the shipped vLLM
profiles launch, its short aliases and underscores, --speculative-config's draft, owned flags."""

from __future__ import annotations

import json
import shlex

import pytest

from sparkctl.discover.launch_line import items
from sparkctl.engines.vllm import flags as F
from sparkctl.engines.vllm.from_command import OWNED, launcher_words, read


def parse(line: str):
    words = shlex.split(line)
    n = launcher_words(words)
    assert n is not None
    return read(items(words[n:]))


@pytest.mark.parametrize(
    ("line", "n"),
    [
        ("vllm serve a/b", 2),
        ("/usr/local/bin/vllm serve a/b", 2),
        ("python3 -m vllm.entrypoints.openai.api_server --model a/b", 3),
        ("python -m sglang.launch_server", None),
        ("vllm bench serve", None),
    ],
)
def test_launcher_words(line: str, n: int | None) -> None:
    assert launcher_words(shlex.split(line)) == n


def test_two_gpu_box_line() -> None:
    # profiles/vllm-two-gpu-box.yaml's flags, as one `vllm serve` line
    frag, findings = parse(
        "vllm serve Qwen/Qwen3-14B-AWQ --revision main --tensor-parallel-size 2 "
        "--gpu-memory-utilization 0.85 --max-model-len 32768 --enable-prefix-caching --port 8000"
    )
    assert findings == []
    assert frag["kind"] == "vllm" and frag["model"] == {"id": "Qwen/Qwen3-14B-AWQ", "revision": "main"}
    assert frag["layout"] == {"tp": 2}
    assert frag["engine"] == {"port": 8000, "served_model_name": "Qwen/Qwen3-14B-AWQ"}
    assert frag["args"] == {
        "gpu-memory-utilization": 0.85,
        "max-model-len": 32768,
        "enable-prefix-caching": True,
    }


def test_short_aliases_underscores_and_model_flag() -> None:
    frag, findings = parse(
        "python -m vllm.entrypoints.openai.api_server --model a/b -tp 2 -pp 2 -q awq --max_num_seqs 8"
    )
    assert findings == []
    assert frag["layout"] == {"tp": 2, "pp": 2}
    assert parse("vllm serve a/b --tp 4")[0]["layout"] == {"tp": 4}
    assert frag["args"] == {"quantization": "awq", "max-num-seqs": 8}


def test_multi_node_rank1_headless_line() -> None:
    frag, _ = parse(
        "vllm serve a/b --tensor-parallel-size 2 --nnodes 2 --node-rank 1 "
        "--master-addr 192.168.100.10 --master-port 50051 --headless"
    )
    assert frag["layout"] == {
        "tp": 2,
        "nnodes": 2,
        "node_rank": 1,
        "dist_init_addr": "192.168.100.10",
        "dist_init_port": 50051,
    }
    assert frag["args"] == {}


def test_speculative_config_draft_becomes_the_profile_draft() -> None:
    spec = json.dumps(
        {"method": "dflash", "model": "z-lab/D", "revision": "abc", "num_speculative_tokens": 8}
    )
    frag, findings = parse(f"vllm serve a/b --speculative-config '{spec}'")
    assert findings == []
    assert frag["draft"] == {"id": "z-lab/D", "revision": "abc"}
    rest = json.loads(str(frag["args"]["speculative-config"]))
    assert rest == {"method": "dflash", "num_speculative_tokens": 8}
    merged = json.loads(F.speculative_config("z-lab/D", "abc", str(frag["args"]["speculative-config"])))
    assert merged == json.loads(spec)  # what the plan renders is the user's JSON again


def test_unknown_flag_owned_flags_and_the_key() -> None:
    frag, findings = parse("vllm serve a/b --gpu-memory-utilisation 0.9 --api-key sk-x --trust-remote-code")
    assert frag["args"] == {} and frag["api_keys"] == ["api_key"]
    assert frag["engine"]["trust_remote_code"] is True and "sk-x" not in repr(frag)
    unknown = next(f for f in findings if f.severity == "error")
    assert "no flag --gpu-memory-utilisation" in unknown.message
    assert unknown.fix == "use --gpu-memory-utilization"


def test_every_managed_flag_is_a_field_never_an_arg() -> None:
    assert set(F.MANAGED_FLAGS) <= set(OWNED)


def test_what_vllm_does_by_default_is_kept_its_port_and_the_model_as_the_name() -> None:
    assert parse("vllm serve Org/M")[0]["engine"] == {"port": 8000, "served_model_name": "Org/M"}
    assert parse("vllm serve Org/M --port 9 --served-model-name m")[0]["engine"] == {
        "port": 9,
        "served_model_name": "m",
    }
