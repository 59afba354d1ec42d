"""`sparkctl bench` against a real third-party server: its token counts are the server's own
`usage`, and its rates are reproducible within the spread it reports."""

from __future__ import annotations

import json
import subprocess
import sys

from sparkctl.benchmark.measure import request_kwargs
from sparkctl.benchmark.runner import run_bench
from sparkctl.benchmark.workloads import Workload
from sparkctl.verify.client import make_client

SUITE = [
    Workload("code", "code", 48),
    Workload("long-prefix", "long-prefix", 8, prefix_words=600),
    Workload("code x2", "code", 24, concurrency=2),
]


def test_bench_token_counts_equal_server_usage(server) -> None:
    from transformers import AutoTokenizer

    result = run_bench(server.url, server.model, SUITE, reps=2, budget_s=300)
    client = make_client(server.url)
    snapshot = next((server.hf_home / "hub").glob("models--*/snapshots/*"))
    tok = AutoTokenizer.from_pretrained(snapshot)
    checked = 0
    for wres in result.workloads:
        assert len(wres.samples) == 2 * wres.workload.concurrency and wres.truncated is None
        for s in wres.samples:
            # Replay the identical request without streaming: the server's own count must match.
            kw = request_kwargs(server.model, wres.workload, s.rep)
            usage = client.chat.completions.create(**kw, stream=False).usage
            assert (s.prompt_tokens, s.completion_tokens) == (usage.prompt_tokens, usage.completion_tokens)
            # ...and the prompt count is what the model's own tokenizer makes of the chat template.
            text = tok.apply_chat_template(
                kw["messages"],
                add_generation_prompt=True,
                tokenize=False,
                enable_thinking=wres.workload.thinking,
            )
            assert s.prompt_tokens == len(tok(text, add_special_tokens=False)["input_ids"])
            assert s.completion_tokens == wres.workload.max_tokens  # random weights never stop early
            checked += 1
    assert checked == 2 + 2 + 4


def test_bench_rates_reproducible_within_reported_spread(server) -> None:
    suite = [Workload("code", "code", 64)]
    runs = [run_bench(server.url, server.model, suite, reps=8, budget_s=300) for _ in range(2)]
    a, b = (r.workloads[0].stats() for r in runs)
    for key in ("decode_tps", "ttft_s"):
        # Each run's median lies within the other's reported spread ([min, max] widened by two
        # stdev). Medians, because this server sometimes delivers a whole reply in one burst,
        # which makes that one sample's decode rate meaningless (it stays visible in max/stdev).
        assert a[key].contains(b[key].median, k=2), (key, a[key], b[key])
        assert b[key].contains(a[key].median, k=2), (key, a[key], b[key])


def test_bench_cli_saves_json_with_samples(server, tmp_path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparkctl",
            "bench",
            "--url",
            server.url,
            "--model",
            server.model,
            "--reps",
            "2",
            "--max-tokens",
            "16",
            "--prefix-words",
            "300",
            "-w",
            "prose",
            "-w",
            "long-prefix",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "prose" in proc.stdout and "long-prefix" in proc.stdout and "TTFT" in proc.stdout
    data = json.loads(out.read_text())
    assert data["config_hash"] is None and data["model"] == server.model and data["reps"] == 2
    assert [w["name"] for w in data["workloads"]] == ["prose", "long-prefix"]
    prose = data["workloads"][0]
    assert len(prose["samples"]) == 2
    assert prose["stats"]["completion_tokens"]["mean"] == 16
    assert (
        prose["stats"]["ttft_s"]["min"] <= prose["stats"]["ttft_s"]["mean"] <= prose["stats"]["ttft_s"]["max"]
    )
