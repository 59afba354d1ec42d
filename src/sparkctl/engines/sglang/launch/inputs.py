"""The inputs every launch check reads: the SGLang flags of a planned argv, the GPUs, the version.

`read_flags` turns the planned container command into {flag: value}; `LaunchSettings` gives the
flags SGLang's memory and backend logic reads, with SGLang 0.5.23's defaults. A fix is expressed
as flag changes applied to the argv with `with_flags`, so a proposed fix goes through exactly the
same checks as the original plan.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# 0.95 hard-rebooted GB10 during "Capture target verify CUDA graph" (recipe.md): the one cap,
# used as the plan's default on GB10 (engines/sglang/flags.py), by the launch rules and by
# preflight's UnifiedMemory.
GB10_MAX_MEM_FRACTION = 0.90
DSPARK_DEFAULT_GAMMA = 7  # srt/speculative/dspark_components/dspark_config.py: DEFAULT_DSPARK_GAMMA

FlagValue = str | bool | list[str]
LAUNCH_MODULES = ("sglang.launch_server", "sglang.srt.server", "sglang.launch")
_NUMBER = re.compile(r"^-?\d+(\.\d+)?([eE]-?\d+)?$")


@dataclass(frozen=True)
class GpuFacts:
    """One GPU as the launch checks see it (probed, or the profile's facts when offline)."""

    name: str
    memory_mib: int  # total per GPU (unified boxes: the usable total)
    capability: tuple[int, int]
    unified: bool = False
    available_mib: int | None = None  # probed free memory before load (unified: MemAvailable)
    probed_on: str | None = None  # the node the figure was probed on

    @property
    def is_gb10(self) -> bool:
        return self.capability == (12, 1) and self.unified

    @property
    def sm(self) -> str:
        return f"sm{self.capability[0]}{self.capability[1]}"

    @classmethod
    def from_profile(cls, gpu) -> GpuFacts:  # sparkctl.profile.schema.GpuSpec
        major, minor = (int(x) for x in gpu.compute_capability.split("."))
        return cls(
            name=gpu.name,
            memory_mib=int(gpu.memory_gib * 1024),
            capability=(major, minor),
            unified=gpu.unified_memory,
        )


def server_flags(argv: list[str]) -> list[str]:
    """The SGLang flags of a container command (what follows `-m sglang.launch_server`)."""
    for i, word in enumerate(argv):
        if word in LAUNCH_MODULES or word.endswith("launch_server.py"):
            return list(argv[i + 1 :])
        if word == "serve" and i > 0 and argv[i - 1].endswith("sglang"):
            return list(argv[i + 1 :])
    first = next((i for i, w in enumerate(argv) if w.startswith("--")), len(argv))
    return list(argv[first:])


def read_flags(flags: list[str]) -> dict[str, FlagValue]:
    """--a 1 --b --c x y --d=2 -> {a: "1", b: True, c: ["x", "y"], d: "2"} (names without --)."""
    out: dict[str, FlagValue] = {}
    key: str | None = None
    for word in flags:
        if word.startswith("--") and not _NUMBER.match(word):
            name, eq, value = word[2:].partition("=")
            key = name.replace("_", "-")
            out[key] = value if eq else True
            if eq:
                key = None
            continue
        if key is None:
            continue
        prev = out[key]
        out[key] = word if prev is True else ([*prev, word] if isinstance(prev, list) else [prev, word])
    return out


def with_flags(argv: list[str], changes: dict[str, FlagValue | None]) -> list[str]:
    """A copy of argv with flags set (value), bare (True) or removed (None/False)."""
    out: list[str] = []
    skip = False
    for word in argv:
        if word.startswith("--") and not _NUMBER.match(word):
            name = word[2:].partition("=")[0].replace("_", "-")
            skip = name in changes
            if skip:
                continue
        elif skip:
            continue
        out.append(word)
    for name, value in changes.items():
        if value is None or value is False:
            continue
        out.append(f"--{name}")
        if value is not True:
            out.extend(value if isinstance(value, list) else [str(value)])
    return out


_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")
_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
# Flags SGLang parses with human_readable_int (srt/arg_groups/fields/model.py:110,
# fields/schedule.py:71); every other int flag is a plain int().
HUMAN_INT_FLAGS = ("context-length", "max-prefill-tokens")


def human_readable_int(value: str) -> int:
    """srt/utils/common.py:3394 human_readable_int: '32k' -> 32000, '512Ki' -> 524288, '25.6k' ->
    25600; suffixes are case-sensitive, IEC suffixes take integers only. ValueError otherwise."""
    from decimal import Decimal, InvalidOperation

    value = value.strip()
    m = _HUMAN_INT.fullmatch(value)
    if m:
        number, suffix = m.groups()
        if suffix in _IEC:
            if "." in number:
                raise ValueError(f"decimals are not allowed with IEC suffixes like {suffix!r}")
            return int(number) * _IEC[suffix]
        try:
            return int(Decimal(number) * _SI[suffix])
        except InvalidOperation:  # pragma: no cover - the regex admits only decimals
            raise ValueError(value) from None
    return int(value)


def bad_value(flags: dict[str, FlagValue], name: str, kind: type) -> str | None:
    """The value of a flag SGLang would reject as not a number (None when it parses or is unset)."""
    v = flags.get(name)
    if not isinstance(v, str):
        return None
    try:
        if name in HUMAN_INT_FLAGS:
            human_readable_int(v)
        else:
            kind(v)
    except ValueError:
        return v
    return None


def _int(flags: dict[str, FlagValue], name: str) -> int | None:
    v = flags.get(name)
    if not isinstance(v, str):
        return None
    try:
        return human_readable_int(v) if name in HUMAN_INT_FLAGS else int(v)
    except ValueError:
        return None


def _float(flags: dict[str, FlagValue], name: str) -> float | None:
    v = flags.get(name)
    return float(v) if isinstance(v, str) and _NUMBER.match(v) else None


def _str(flags: dict[str, FlagValue], name: str) -> str | None:
    v = flags.get(name)
    return v if isinstance(v, str) else None


def _on(flags: dict[str, FlagValue], name: str) -> bool:
    return flags.get(name) is True


def _setting(
    flags: dict[str, FlagValue], read: Callable[..., Any], names: tuple[str, ...], default: Any
) -> Any:
    """The first of `names` set (a zero or empty value counts as unset where there is a default)."""
    value = None
    for name in names:
        value = read(flags, name)
        if value:
            break
    return default if default is not None and not value else value


# field -> (how its value is read, the flags that set it (the first one set wins), its default)
_FROM_ARGV: dict[str, tuple[Callable[..., Any], tuple[str, ...], Any]] = {
    "tp": (_int, ("tp", "tp-size", "tensor-parallel-size"), 1),
    "pp": (_int, ("pp", "pp-size", "pipeline-parallel-size"), 1),
    "nnodes": (_int, ("nnodes",), 1),
    "mem_fraction_static": (_float, ("mem-fraction-static",), None),
    "kv_cache_dtype": (_str, ("kv-cache-dtype",), "auto"),
    "context_length": (_int, ("context-length",), None),
    "spec_algorithm": (_str, ("speculative-algorithm",), None),
    "draft_model_path": (_str, ("speculative-draft-model-path",), None),
    "num_draft_tokens": (_int, ("speculative-num-draft-tokens",), None),
    "dflash_block_size": (_int, ("speculative-dflash-block-size",), None),
    "draft_window_size": (_int, ("speculative-draft-window-size",), None),
    "dspark_block_size": (_int, ("speculative-dspark-block-size",), None),
    "max_running_requests": (_int, ("max-running-requests",), None),
    "max_total_tokens": (_int, ("max-total-tokens",), None),
    "max_mamba_cache_size": (_int, ("max-mamba-cache-size",), None),
    "mamba_full_memory_ratio": (_float, ("mamba-full-memory-ratio",), 0.9),
    "mamba_ssm_dtype": (_str, ("mamba-ssm-dtype",), None),
    "mamba_strategy": (_str, ("mamba-radix-cache-strategy", "mamba-scheduler-strategy"), "auto"),
    "mamba_track_interval": (_int, ("mamba-track-interval",), 256),
    "disable_radix_cache": (_on, ("disable-radix-cache",), None),
    "disable_overlap_schedule": (_on, ("disable-overlap-schedule",), None),
    "page_size": (_int, ("page-size",), None),
    "chunked_prefill_size": (_int, ("chunked-prefill-size",), None),
    "attention_backend": (_str, ("attention-backend",), None),
    "prefill_attention_backend": (_str, ("prefill-attention-backend",), None),
    "decode_attention_backend": (_str, ("decode-attention-backend",), None),
    "draft_attention_backend": (_str, ("speculative-draft-attention-backend",), None),
    "draft_kv_cache_dtype": (_str, ("speculative-draft-kv-cache-dtype",), None),
    "disable_cuda_graph": (_on, ("disable-cuda-graph",), None),
    "disable_prefill_cuda_graph": (_on, ("disable-prefill-cuda-graph",), None),
    "json_model_override_args": (_str, ("json-model-override-args",), None),
    "sleep_on_idle": (_on, ("sleep-on-idle",), None),
    "stream_interval": (_int, ("stream-interval",), None),
}


SPEC_DEFAULT_MAX_RUNNING_REQUESTS = 48  # speculative_hook.py: _handle_dflash


@dataclass(frozen=True)
class LaunchSettings:
    """The SGLang flags the checks read, defaults as in SGLang 0.5.23 (srt/arg_groups/fields/)."""

    flags: dict[str, FlagValue]
    tp: int
    pp: int
    nnodes: int
    mem_fraction_static: float | None
    kv_cache_dtype: str
    context_length: int | None
    spec_algorithm: str | None
    draft_model_path: str | None
    num_draft_tokens: int | None
    dflash_block_size: int | None
    draft_window_size: int | None
    dspark_block_size: int | None  # DSPARK's gamma: it verifies gamma + 1 tokens per step
    max_running_requests: int | None
    max_total_tokens: int | None
    max_mamba_cache_size: int | None
    mamba_full_memory_ratio: float
    mamba_ssm_dtype: str | None
    mamba_strategy: str  # --mamba-radix-cache-strategy (0.5.23) / --mamba-scheduler-strategy (older)
    mamba_track_interval: int
    disable_radix_cache: bool
    disable_overlap_schedule: bool
    page_size: int | None
    chunked_prefill_size: int | None
    attention_backend: str | None
    prefill_attention_backend: str | None
    decode_attention_backend: str | None
    draft_attention_backend: str | None
    draft_kv_cache_dtype: str | None
    disable_cuda_graph: bool
    disable_prefill_cuda_graph: bool
    json_model_override_args: str | None
    sleep_on_idle: bool
    stream_interval: int | None

    @property
    def is_dflash(self) -> bool:
        return (self.spec_algorithm or "").upper() in ("DFLASH", "DSPARK")

    @property
    def has_spec(self) -> bool:
        return self.spec_algorithm is not None

    def draft_tokens(self, draft_block_size: int | None) -> int:
        """Tokens verified per step (0 without speculation). Under DFLASH the block size is the
        draft token count; with neither flag set SGLang reads the draft's config (default 16)."""
        if not self.has_spec:
            return 0
        if self.is_dspark:  # speculative_hook.py: _handle_dspark, gamma + 1 (gamma 7 by default)
            gamma = self.dspark_block_size or (None if self.num_draft_tokens else draft_block_size)
            return gamma + 1 if gamma else (self.num_draft_tokens or DSPARK_DEFAULT_GAMMA + 1)
        return self.dflash_block_size or self.num_draft_tokens or draft_block_size or 16

    @property
    def is_dspark(self) -> bool:
        return (self.spec_algorithm or "").upper() == "DSPARK"

    @property
    def effective_max_running_requests(self) -> int | None:
        """--max-running-requests, else the 48 SGLang forces under speculation (speculative_hook.py)."""
        return self.max_running_requests or (SPEC_DEFAULT_MAX_RUNNING_REQUESTS if self.has_spec else None)

    @classmethod
    def from_argv(cls, argv: list[str]) -> LaunchSettings:
        f = read_flags(server_flags(argv))
        return cls(flags=f, **{field: _setting(f, *how) for field, how in _FROM_ARGV.items()})


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """'0.5.23', 'v0.5.23.post1', '0.5.10rc0' -> (0, 5, 23) / (0, 5, 10); None if unknown."""
    if not text:
        return None
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        return None
    return tuple(int(x) for x in m.groups(default="0"))
