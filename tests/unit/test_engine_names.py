"""An engine's name (sglang, vllm, llamacpp) appears in code only in its own package under engines/: every
module outside engines/ is tokenized, and a name, comment, docstring or import that names an
engine fails, as does a string literal that is exactly an engine's name (dispatch on a name:
`if kind == "vllm"`). User-facing text (errors, help, image refs) may name the engine it speaks of.

The router is a separate product: `sglang-router` / `sglang_router` (its command and module) are
not the engine and are taken out before the match.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "sparkctl"
ENGINE = re.compile(r"sglang|vllm|llamacpp|llama[._-]cpp|llama[._-]server", re.IGNORECASE)
ROUTER = re.compile(r"sglang[-_]router", re.IGNORECASE)  # the router product, not the engine

# (module path under src/sparkctl, the exact token) -> why it may name an engine.
ALLOWED: dict[tuple[str, str], str] = {
    (
        "profile/base.py",
        '"sglang"',
    ): "ENGINE_KINDS / DEFAULT_ENGINE: the engine names users write in engine.kind",
    ("profile/base.py", '"vllm"'): "ENGINE_KINDS: the engine names users write in engine.kind",
    ("profile/base.py", '"llamacpp"'): "ENGINE_KINDS: the engine names users write in engine.kind",
}
HELP_SUFFIX = "_cmd"  # a command function's docstring is its --help text: user-facing


def _docstrings(tree: ast.AST) -> set[tuple[int, int]]:
    """Start positions of every string that stands alone as a statement (docstrings and the like),
    but a command's (`*_cmd`), which is its --help text."""
    help_text = {
        (n.body[0].lineno, n.body[0].col_offset)
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef) and n.name.endswith(HELP_SUFFIX) and n.body
    }
    out = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            out.add((node.lineno, node.col_offset))
    return out - help_text


def _exact_name(token: str) -> bool:
    try:
        value = ast.literal_eval(token)
    except (ValueError, SyntaxError):  # f-strings: text, never a bare name
        return False
    return isinstance(value, str) and ENGINE.fullmatch(value.strip()) is not None


def violations(source: str, path: str) -> list[str]:
    """Each place in `source` (a module at `path` under src/sparkctl) that names an engine."""
    docs = _docstrings(ast.parse(source))
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        text = ROUTER.sub("", tok.string)
        kind = None
        if tok.type == tokenize.NAME and ENGINE.search(text):
            kind = "name"
        elif tok.type == tokenize.COMMENT and ENGINE.search(text):
            kind = "comment"
        elif tok.type == tokenize.STRING and tok.start in docs and ENGINE.search(text):
            kind = "docstring"
        elif tok.type == tokenize.STRING and _exact_name(tok.string):
            kind = "engine name as a value"
        if kind and (path, tok.string) not in ALLOWED:
            out.append(f"{path}:{tok.start[0]}: {kind}: {tok.string.splitlines()[0][:90]}")
    return out


def outside_engines() -> list[str]:
    out = []
    for file in sorted(SRC.rglob("*.py")):
        rel = file.relative_to(SRC).as_posix()
        if not rel.startswith("engines/"):
            out += violations(file.read_text(), rel)
    return out


def test_no_module_outside_engines_names_an_engine() -> None:
    bad = outside_engines()
    assert not bad, f"{len(bad)} place(s) name an engine outside engines/:\n" + "\n".join(bad)


def test_the_checker_catches_each_kind_of_naming() -> None:
    source = (
        '"""Talks to SGLang."""\n'
        "from sparkctl.engines.vllm import ENGINE\n"
        "import json  # parse vLLM's answer\n"
        "def f(kind):\n"
        "    sglang_port = 1\n"
        '    if kind == "vllm":\n'
        '        return "start SGLang first"  # user-facing text: allowed\n'
        '    return "sglang-router --help", f"{kind}"\n'
    )
    found = violations(source, "lifecycle/x.py")
    kinds = [v.split(": ")[1] for v in found]
    assert kinds == ["docstring", "name", "comment", "name", "engine name as a value"], found
    assert violations('X = "sglang"\n', "profile/base.py") == []  # the reasoned allowlist
    assert violations('def up_cmd():\n    """Start SGLang."""\n', "commands/up.py") == []  # --help text
    assert violations('X = "sglang"\n', "top/x.py") == ['top/x.py:1: engine name as a value: "sglang"']
