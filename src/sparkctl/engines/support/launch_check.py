"""The launch check's request and result (`LaunchSafety.launch_check`, what `fit` and `plan --check`
show), the margin a memory fix must leave, and what a memory model says a fraction serves
(`MemoryModel.serving`, for the memory admission before a start on unified memory)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sparkctl.findings import Finding, Severity

DEFAULT_MIN_REQUESTS = 4
DEFAULT_HEADROOM_MIB = 1024


# What an fp8 KV cache gives up, as both engines document it: what a memory fix proposing it says.
FP8_KV_COST = (
    "FP8 KV cache: SGLang and vLLM document minimal accuracy degradation (e4m3 keeps more precision, "
    "e5m2 more range); the attention backend must fuse it or throughput drops"
)


@dataclass(frozen=True)
class Margin:
    min_requests: int = DEFAULT_MIN_REQUESTS  # served load when the engine's request cap is unset
    headroom_mib: int = DEFAULT_HEADROOM_MIB  # a fix must still fit with this much less free memory

    def required(self, max_running_requests: int | None) -> int:
        return max_running_requests or self.min_requests


class MemoryReport(Protocol):
    """What `fit` shows of an engine's memory plan (LaunchCheck.memory)."""

    fits: bool
    notes: list[str]

    def to_json(self) -> dict: ...

    def heading(self) -> str: ...  # the table's title after the mode

    def rows(self) -> list[tuple[str, str]]: ...  # (what, value) per rank, plain text

    def terms_line(self) -> str: ...  # which of the engine's accounting terms were applied


@dataclass(frozen=True)
class LaunchRequest:
    """How far a launch check may go: `fit`'s and `plan --check`'s options."""

    reach: bool = True  # connect: probe GPU memory, run the engine's parser in the image on rank 0's node
    parser_timeout: float = 30.0  # seconds for the in-image parser before falling back
    parse_flags: bool = True  # check the flag names with the engine's parser
    target_dir: Path | None = None  # model directories given on the command line
    draft_dir: Path | None = None
    require_models: bool = False  # refuse (ModelNotFound) when the model is not on this machine
    margin: Margin | None = None
    progress: Callable[[str], None] | None = None
    build: Callable[..., Any] | None = None  # planning's build_plan (other layouts of the same boxes)


@dataclass
class LaunchCheck:
    """Findings, the engine's memory plan (None: not modelled or not planned; it has `to_json()`),
    the memory fixes it proposes, the flags `fit` proposes, and other layouts of the same boxes."""

    findings: list[Finding]
    memory: MemoryReport | None = None
    memory_fixes: list[Any] = field(default_factory=list)  # each: changes, flags, why, tradeoff, plan
    fix: dict[str, Any] = field(default_factory=dict)  # flag -> value (None: drop the flag)
    layouts: list = field(default_factory=list)  # each has to_json() (the engine's layout options)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == Severity.ERROR]


@dataclass(frozen=True)
class Serving:
    """What an engine's memory model says a fraction gives: requests at once and KV tokens (per rank)."""

    requests: int
    kv_tokens: int
    context: int
    fits: bool
