"""The third engine served for real (issue 45): llama.cpp's `llama-server`, run with the argv sparkctl
plans for `engine.kind: llamacpp`, on a tiny GGUF model this script writes with the `gguf` package.

Steps: write a 2-layer llama-architecture GGUF (random F32 weights, a 300-token SPM vocab) into a
fake HF cache (`hub/models--sparkctl--tiny-gguf/snapshots/<commit>/`); plan a one-node profile
through sparkctl (build_plan: the engine's argv and its key file, rendered as `up` renders it);
map the container's paths (HF_HOME, the key file) onto this machine and start that argv; wait with
sparkctl's own readiness probe (the engine's /v1/models then /health); then check the key (no key:
401, the planned key: a completion), the metric names the engine declares, and time a generation.

llama-server comes from $LLAMA_SERVER, PATH, or a build cached in CACHE: the llama.cpp sources
vendored in the llama-cpp-python sdist (from the package registry), `cmake --target llama-server`
(CPU, minutes on a small box; never in CI). The wheel of `llama-cpp-python[server]` itself is
the Python server, not `llama-server`: `--fallback-python` serves the same GGUF with it instead.

    python bench/llamacpp.py [--tokens 32] [--build-only] [--fallback-python]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

CACHE = Path(os.environ.get("SPARKCTL_BENCH_CACHE", "/var/cache/sparklab/llamacpp"))
MODEL_ID = "sparkctl/tiny-gguf"
COMMIT = "0" * 39 + "1"
GGUF_NAME = "tiny-f32.gguf"
KEY = "bench-llamacpp-key"

PROFILE = f"""
cluster: llamabench
nodes: [{{name: here, address: local, gpus: 1}}]
image: {{ref: "llama.cpp:bench"}}
model: {{target: {{id: {MODEL_ID}, revision: "{COMMIT}"}}}}
engine:
  kind: llamacpp
  served_model_name: tiny
  api_key: {{env: SPARKCTL_BENCH_KEY}}
  options: {{gguf_file: {GGUF_NAME}}}
  container: {{gpus: false}}
  args: {{ctx-size: 256, metrics: true, threads: 1}}
modes:
  solo: {{nodes: [here], default: true}}
"""


def write_gguf(path: Path, n_embd: int = 64, n_layer: int = 2, n_ff: int = 128, n_head: int = 4) -> None:
    """A llama-architecture GGUF llama.cpp loads: F32 weights, an SPM vocab with byte fallback."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(0)
    words = [f"\u2581{w}" for w in ("the", "a", "of", "to", "and", "in", "is", "it", "you", "that", "was")]
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [f"\u2581{chr(c)}" for c in range(97, 123)]
    pieces = list(dict.fromkeys(["\u2581", *letters, *words]))  # llama.cpp refuses a token twice
    tokens = ["<unk>", "<s>", "</s>", *[f"<0x{b:02X}>" for b in range(256)], *pieces]
    types = [2, 3, 3, *[6] * 256, *[1] * (len(tokens) - 259)]  # unknown, control, byte, normal
    scores = [0.0, 0.0, 0.0, *[0.0] * 256, *[-float(i) for i in range(len(tokens) - 259)]]
    n_vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("sparkctl tiny")
    w.add_context_length(256)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def t(*shape: int) -> np.ndarray:  # numpy (rows, cols) is GGUF's ne reversed
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    w.add_tensor("token_embd.weight", t(n_vocab, n_embd))
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.add_tensor("output.weight", t(n_vocab, n_embd))
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"blk.{i}.{name}.weight", t(n_embd, n_embd))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", t(n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_up.weight", t(n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_down.weight", t(n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def build_llama_server() -> Path:
    """llama-server from the llama.cpp sources the llama-cpp-python sdist vendors, cached in CACHE."""
    binary = CACHE / "bin" / "llama-server"
    if binary.exists():
        return binary
    CACHE.mkdir(parents=True, exist_ok=True)
    sdist = CACHE / "sdist"
    if not any(sdist.glob("llama_cpp_python-*.tar.gz")):
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(sdist)]
        subprocess.run([*pip, "llama-cpp-python"], check=True)
    archive = next(sdist.glob("llama_cpp_python-*.tar.gz"))
    src = CACHE / "src"
    if not src.exists():
        src.mkdir()
        subprocess.run(["tar", "-xzf", str(archive), "-C", str(src), "--strip-components=1"], check=True)
    llama = src / "vendor" / "llama.cpp"
    build = CACHE / "build"
    flags = ["-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TESTS=OFF", "-DGGML_NATIVE=ON"]
    nice = ["nice", "-n", "19"]
    subprocess.run(
        [*nice, "cmake", "-S", str(llama), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release", *flags], check=True
    )
    subprocess.run([*nice, "cmake", "--build", str(build), "--target", "llama-server", "-j", "2"], check=True)
    found = next(build.rglob("llama-server"))
    binary.parent.mkdir(exist_ok=True)
    shutil.copy2(found, binary)
    return binary


def find_llama_server() -> Path:
    given = os.environ.get("LLAMA_SERVER") or shutil.which("llama-server")
    return Path(given) if given else build_llama_server()


def planned(hf_home: Path):
    """The plan sparkctl makes for the profile above: rank 0's argv (container paths mapped onto
    this machine), its secret files' contents, and its endpoint at the address the argv binds."""
    import yaml

    from sparkctl.engines import get_engine
    from sparkctl.planning.build import build_plan
    from sparkctl.profile.schema import Profile
    from sparkctl.secrets import render_files

    profile = Profile.model_validate(yaml.safe_load(PROFILE))
    plan = build_plan(profile, "solo")
    (rank,) = plan.ranks
    container_home = str(rank.env["HF_HOME"])
    files = render_files(rank.secrets, None)
    argv = [w.replace(container_home, str(hf_home)) for w in rank.argv]
    host, port = argv[argv.index("--host") + 1], int(argv[argv.index("--port") + 1])
    endpoint = dataclasses.replace(plan.groups[0].endpoint, host=host, port=port)
    return get_engine("llamacpp"), argv, files, endpoint


def http(
    url: str, body: dict | None = None, key: str | None = None, timeout: float = 60
) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def serve_and_check(binary: Path, tokens: int) -> int:
    from sparkctl.runtime.readiness import probe

    work = Path(tempfile.mkdtemp(prefix="sparkctl-llamacpp-"))
    snapshot = work / "hf" / "hub" / f"models--{MODEL_ID.replace('/', '--')}" / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    t0 = time.monotonic()
    write_gguf(snapshot / GGUF_NAME)
    print(
        f"gguf: {(snapshot / GGUF_NAME).stat().st_size / 1e6:.2f} MB written in {time.monotonic() - t0:.2f} s"
    )
    os.environ["SPARKCTL_BENCH_KEY"] = KEY
    engine, argv, files, endpoint = planned(work / "hf")
    assert engine.auth is not None
    key_file = work / "key"
    key_file.write_bytes(files[engine.auth.key_file])
    key_file.chmod(0o400)
    argv = [str(binary), *[str(key_file) if w == engine.auth.key_file else w for w in argv[1:]]]
    print("argv:", " ".join(argv))
    unknown = flags_unknown_to(binary, argv)
    print(f"sparkctl's flag check against this llama-server's --help: {unknown or 'every flag known'}")
    assert KEY not in " ".join(argv)
    log = (work / "server.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        start = time.monotonic()
        health = probe(endpoint)
        while not health.ready and proc.poll() is None and time.monotonic() - start < 300:
            time.sleep(0.2)
            health = probe(endpoint)
        if not health.ready:
            print(f"not ready: {health.detail} (exit {proc.poll()}); log: {work / 'server.log'}")
            return 1
        print(f"ready in {time.monotonic() - start:.2f} s: {endpoint.url} serves {health.served}")
        url = endpoint.url
        body = {"model": "tiny", "prompt": "the a of", "max_tokens": tokens, "ignore_eos": True}
        code, _ = http(f"{url}/v1/completions", body)
        print(f"without the key: HTTP {code}")
        t1 = time.monotonic()
        code, out = http(f"{url}/v1/completions", body, KEY)
        took = time.monotonic() - t1
        usage = json.loads(out).get("usage", {}) if code == 200 else {}
        n = usage.get("completion_tokens", 0)
        print(f"with the key: HTTP {code}, {n} tokens in {took:.3f} s ({n / took:.0f} tok/s)")
        chat = {"model": "tiny", "messages": [{"role": "user", "content": "the"}], "max_tokens": 4}
        ccode, _ = http(f"{url}/v1/chat/completions", chat, KEY)
        print(f"chat completion: HTTP {ccode}")
        scode, _ = http(f"{url}/slots", key=KEY)
        print(f"/slots (rendered off: --no-slots): HTTP {scode}")
        mcode, text = http(f"{url}/metrics", key=KEY)
        names = engine.metrics
        declared = (
            [v for f, v in vars(names).items() if isinstance(v, str) and f != "enable_flag"] if names else []
        )
        missing = [m for m in declared if m not in text.decode(errors="replace")]
        print(
            f"/metrics: HTTP {mcode}, {len(declared) - len(missing)} of {len(declared)} declared names present"
        )
        if missing:
            print("  missing:", ", ".join(missing))
        leaked = KEY in (work / "server.log").read_text(errors="replace")
        print(f"the key in the server's log: {leaked}")
        ok = code == 200 and n > 0 and ccode == 200 and mcode == 200 and not missing and scode != 200
        ok = ok and not leaked and not unknown
        print("RESULT:", "served" if ok else "FAILED")
        return 0 if ok else 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def fallback_python(tokens: int) -> int:
    """The same GGUF behind llama-cpp-python's own server (not the argv sparkctl plans)."""
    work = Path(tempfile.mkdtemp(prefix="sparkctl-llamacpp-py-"))
    write_gguf(work / GGUF_NAME)
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(work / GGUF_NAME), "--port", "38123"]
    argv += ["--model_alias", "tiny", "--api_key", KEY, "--n_ctx", "256"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                if http("http://127.0.0.1:38123/v1/models", key=KEY, timeout=2)[0] == 200:
                    break
            except OSError:
                time.sleep(0.2)
        body = {"model": "tiny", "prompt": "the a", "max_tokens": tokens}
        code, out = http("http://127.0.0.1:38123/v1/completions", body, KEY)
        nokey = http("http://127.0.0.1:38123/v1/completions", body)[0]
        print(f"llama_cpp.server: with the key HTTP {code}, without HTTP {nokey}: {out[:120]!r}")
        return 0 if code == 200 and nokey == 401 else 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--build-only", action="store_true", help="build (or find) llama-server and stop")
    ap.add_argument("--fallback-python", action="store_true", help="serve with llama_cpp.server instead")
    ap.add_argument(
        "--print-flags",
        action="store_true",
        help="print the options of its --help as engines/llamacpp/cli_flags.py lists them, and stop",
    )
    args = ap.parse_args()
    if args.fallback_python:
        return fallback_python(args.tokens)
    t0 = time.monotonic()
    binary = find_llama_server()
    print(f"llama-server: {binary} ({time.monotonic() - t0:.0f} s to find or build)")
    if args.print_flags:
        return print_flags(binary)
    return 0 if args.build_only else serve_and_check(binary, args.tokens)


def help_of(binary: Path) -> frozenset[str]:
    """The options of its --help, read as the launch check reads an image's (check.help_options)."""
    from sparkctl.engines.llamacpp.check import help_options

    done = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60, check=False)
    return help_options(done.stdout + "\n" + done.stderr)


def flags_unknown_to(binary: Path, argv: list[str]) -> list[str]:
    """The planned argv's flags this llama-server does not know (what LlamaCppFlags would refuse)."""
    from sparkctl.engines.llamacpp.check import argv_flags

    return sorted(set(argv_flags(argv, argv[:1])) - help_of(binary))


def print_flags(binary: Path) -> int:
    """The options its --help lists and how they differ from the release list sparkctl ships."""
    import textwrap

    from sparkctl.engines.llamacpp.cli_flags import CLI_FLAGS

    known = help_of(binary)
    print(textwrap.fill(" ".join(sorted(known)), width=100, break_on_hyphens=False, break_long_words=False))
    print(f"{len(known)} options; not in cli_flags.py: {sorted(known - CLI_FLAGS) or 'none'}")
    print(f"in cli_flags.py, not in this --help: {sorted(CLI_FLAGS - known) or 'none'}")
    return 0 if known else 1


if __name__ == "__main__":
    sys.exit(main())
