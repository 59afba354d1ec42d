"""SGLang's launch-line reader: real lines (the reference recipe, profiles/two-gpu-box.yaml's
widely reported command) -> the profile's fields and args; unknown flags and flags sparkctl owns."""

from __future__ import annotations

import shlex

import pytest

from sparkctl.discover.launch_line import items
from sparkctl.engines.sglang import flags as F
from sparkctl.engines.sglang.from_command import OWNED, launcher_words, read

# profiles/two-gpu-box.yaml's header: user B's command on 2x RTX 3090
USER_B = (
    "python -m sglang.launch_server --model-path Qwen/Qwen3.6-27B-GPTQ-Int4 "
    "--speculative-draft-model-path z-lab/Qwen3.6-27B-DFlash --tp-size 2 --speculative-algorithm DFLASH "
    "--speculative-draft-attention-backend fa4 --mem-fraction-static 0.8"
)


def parse(line: str):
    words = shlex.split(line)
    n = launcher_words(words)
    assert n is not None
    return read(items(words[n:]))


@pytest.mark.parametrize(
    ("line", "n"),
    [
        ("python -m sglang.launch_server --port 1", 3),
        ("python3 -m sglang.launch_server", 3),
        ("/opt/venv/bin/python3.12 -m sglang.launch_server --tp 2", 3),
        ("sglang serve --model-path a/b", 2),
        ("vllm serve a/b", None),
        ("python -m vllm.entrypoints.openai.api_server", None),
        ("python -m sglang.bench_serving", None),
    ],
)
def test_launcher_words(line: str, n: int | None) -> None:
    assert launcher_words(shlex.split(line)) == n


def test_user_b_line_gives_model_draft_tp_and_the_rest_as_args() -> None:
    frag, findings = parse(USER_B)
    assert findings == []
    assert frag["kind"] == "sglang"
    assert frag["model"] == {"id": "Qwen/Qwen3.6-27B-GPTQ-Int4", "revision": None}
    assert frag["draft"] == {"id": "z-lab/Qwen3.6-27B-DFlash", "revision": None}
    assert frag["layout"] == {"tp": 2}
    assert frag["args"] == {
        "speculative-algorithm": "DFLASH",
        "speculative-draft-attention-backend": "fa4",
        "mem-fraction-static": 0.8,
    }


def test_recipe_tp2_rank0_line_owned_flags_are_fields() -> None:
    line = (
        "python3 -m sglang.launch_server --model-path Qwen/Qwen3.6-27B-NVFP4 --revision main "
        "--served-model-name qwen3.6-27b --tp 2 --nnodes 2 --node-rank 0 "
        "--dist-init-addr 192.168.100.10:50051 --host 0.0.0.0 --port 8888 --trust-remote-code "
        "--speculative-draft-model-path z-lab/Qwen3.6-27B-DFlash --speculative-draft-model-revision 5b0d4b5 "
        "--disable-prefill-cuda-graph --max-mamba-cache-size 80 --mamba-full-memory-ratio 4.21"
    )
    frag, findings = parse(line)
    assert findings == []
    assert frag["layout"] == {
        "tp": 2,
        "nnodes": 2,
        "node_rank": 0,
        "dist_init_addr": "192.168.100.10",
        "dist_init_port": 50051,
    }
    assert frag["engine"] == {
        "served_model_name": "qwen3.6-27b",
        "host": "0.0.0.0",
        "port": 8888,
        "trust_remote_code": True,
    }
    assert frag["model"]["revision"] == "main" and frag["draft"]["revision"] == "5b0d4b5"
    assert frag["args"] == {
        "disable-prefill-cuda-graph": True,
        "max-mamba-cache-size": 80,
        "mamba-full-memory-ratio": 4.21,
    }


def test_every_managed_flag_is_a_field_never_an_arg() -> None:
    assert set(F.MANAGED_FLAGS) <= set(OWNED)


def test_a_gated_launch_port_on_the_line_says_the_gate_is_sparkctls() -> None:
    frag, findings = parse("python3 -m sglang.launch_server --model-path a/b --gated-launch-port 41000")
    assert "gated-launch-port" not in frag["args"] and "41000" not in repr(frag)
    [f] = findings
    assert f.severity == "warn" and f.fix == "set memory.gated_start: true in the profile"


def test_unknown_flag_is_dropped_with_the_nearest_as_fix_and_prefixes_resolve() -> None:
    frag, findings = parse(
        "python -m sglang.launch_server --model-path a/b --mem-fraction-statik 0.8 --trust-remote --context-len 4096"
    )
    assert "mem-fraction-statik" not in frag["args"] and "mem-fraction-static" not in frag["args"]
    assert frag["args"] == {"context-length": 4096}  # a unique prefix, as argparse takes it
    assert frag["engine"] == {"trust_remote_code": True, "port": 30000, "served_model_name": "a/b"}
    [f] = findings
    assert f.severity == "error" and "no flag --mem-fraction-statik" in f.message
    assert f.fix == "use --mem-fraction-static"


def test_api_key_is_a_field_whose_value_is_never_kept() -> None:
    frag, findings = parse("sglang serve --model-path a/b --api-key sk-secret --admin-api-key adm")
    assert frag["api_keys"] == ["api_key", "admin_api_key"]
    assert "sk-secret" not in repr(frag) and "adm" not in repr(frag["args"])
    assert all("SPARKCTL_API_KEY" in (f.fix or "") for f in findings) and len(findings) == 2


def test_quoted_values_equals_form_lists_and_negative_numbers() -> None:
    frag, findings = parse(
        "python -m sglang.launch_server --model-path=a/b --chat-template 'my template.jinja' "
        "--cuda-graph-bs-decode 1 2 4 --random-seed -1 --json-model-override-args '{\"a\": 1}'"
    )
    assert findings == []
    assert frag["model"]["id"] == "a/b"
    assert frag["args"] == {
        "chat-template": "my template.jinja",
        "cuda-graph-bs-decode": [1, 2, 4],
        "random-seed": -1,
        "json-model-override-args": '{"a": 1}',
    }


def test_bad_layout_value_and_config_file_are_named() -> None:
    frag, findings = parse("python -m sglang.launch_server --model-path a/b --tp two --config c.yaml")
    assert "tp" not in frag["layout"]
    assert [f.message.split(": the")[0] for f in findings] == [
        "--tp 'two' is not a number: dropped",
        "--config c.yaml",
    ]
