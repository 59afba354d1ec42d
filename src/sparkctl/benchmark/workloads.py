"""What `bench` sends. Prompts are fixed text so two runs (or two modes) send the same requests."""

from __future__ import annotations

from dataclasses import dataclass

from sparkctl.clients.prompts import filler

_CODE = (
    "Write a Python module that parses a CSV file of sales records, groups them by region and "
    "month, and prints a summary table. Include type hints and docstrings."
)
_PROSE = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle. "
    "Use vivid, plain language."
)
_THINK = (
    "A train leaves at 09:40 and travels 210 km at 84 km/h. A second train leaves the same "
    "station at 10:05 at 105 km/h on the same track. When and where does it catch up?"
)


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str  # code | prose | thinking | prefill | long-prefix
    max_tokens: int
    concurrency: int = 1
    thinking: bool = False
    prefix_words: int = 0

    def messages(self, rep: int) -> list[dict]:
        """The request for repetition `rep` (rep < 0: the uncounted warm-up)."""
        if self.kind == "code":
            return [{"role": "user", "content": _CODE}]
        if self.kind == "prose":
            return [{"role": "user", "content": _PROSE}]
        if self.kind == "thinking":
            return [{"role": "user", "content": _THINK}]
        if self.kind == "prefill":
            # A new leading line every time: nothing is cached, TTFT is a cold prefill.
            text = filler(self.prefix_words, seed=f"document {rep} (cold)")
            return [{"role": "user", "content": f"{text}\nSummarise the document in one line."}]
        if self.kind == "long-prefix":
            # The same long document, a different question each time: the prefix cache hit path
            # a chat client with a long system prompt or file context takes on every turn.
            text = filler(self.prefix_words, seed="shared document")
            return [
                {"role": "system", "content": text},
                {"role": "user", "content": f"Question {rep}: what is word number {rep + 7}?"},
            ]
        raise ValueError(f"unknown workload kind {self.kind}")


def default_suite(
    max_tokens: int = 256, prefix_words: int = 8000, concurrency: int | list[int] = 4
) -> list[Workload]:
    """The single-stream workloads, then `code xN` for every concurrency level N > 1 (the sweep)."""
    levels = [concurrency] if isinstance(concurrency, int) else concurrency
    suite = [
        Workload("code", "code", max_tokens),
        Workload("prose", "prose", max_tokens),
        Workload("thinking", "thinking", max_tokens, thinking=True),
        Workload("prefill", "prefill", 8, prefix_words=prefix_words),
        Workload("long-prefix", "long-prefix", 8, prefix_words=prefix_words),
    ]
    suite += [Workload(f"code x{n}", "code", max_tokens, concurrency=n) for n in sorted(set(levels)) if n > 1]
    return suite


def sized(suite: list[Workload], words: int) -> list[Workload]:
    """The suite with its long prompts cut to `words` words (see runner.fit_prefix_words)."""
    from dataclasses import replace

    return [replace(w, prefix_words=min(w.prefix_words, words)) if w.prefix_words else w for w in suite]


def parse_levels(text: str) -> list[int]:
    """`--concurrency 1,2,4,8,16` -> [1, 2, 4, 8, 16]."""
    from sparkctl.errors import UsageError

    try:
        levels = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        levels = []
    if not levels or levels[0] < 1 or levels[-1] > 256:
        raise UsageError(
            f"--concurrency {text!r}: want numbers 1-256, comma-separated", fix="e.g. --concurrency 1,2,4,8"
        )
    return levels


def select(suite: list[Workload], names: list[str] | None) -> list[Workload]:
    if not names:
        return suite
    from sparkctl.errors import UsageError

    known = {w.name for w in suite}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown workload(s): {', '.join(unknown)}", fix=f"choose from: {', '.join(known)}")
    return [w for w in suite if w.name in names]
