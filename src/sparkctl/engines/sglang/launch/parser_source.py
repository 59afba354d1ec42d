"""The program that runs SGLang's own parser on the planned flags (in the image or a local
SGLang) and prints one JSON object; flags.py runs it and reads its answer. Self-contained: it
imports nothing of sparkctl, only the SGLang it runs with."""

from __future__ import annotations

# Flags argparse does not constrain whose values SGLang takes only from a registry (0.5.23):
# flag -> the registries that together hold its values, each (module, name): a list or set of
# strings, an Enum (its members' names), or a dict (its keys). DFLASH falls back to another draft
# backend for a value outside DRAFT_ATTENTION_BACKEND_CHOICES (srt/arg_groups/speculative_hook.py:886),
# other algorithms die with "Invalid attention backend"; an algorithm outside SpeculativeAlgorithm,
# the reserved aliases (NEXTN) and the plugins registered at import dies with "Unknown speculative
# algorithm name" (srt/speculative/spec_info.py: from_string, which upper-cases the value).
REGISTRY_FLAGS: dict[str, tuple[tuple[str, str], ...]] = {
    "--speculative-draft-attention-backend": (
        ("sglang.srt.arg_groups.choices", "DRAFT_ATTENTION_BACKEND_CHOICES"),
    ),
    "--speculative-algorithm": (
        ("sglang.srt.speculative.spec_info", "SpeculativeAlgorithm"),
        ("sglang.srt.speculative.spec_registry", "_RESERVED_ALIASES"),
        ("sglang.srt.speculative.spec_registry", "_REGISTRY"),
    ),
}
UPPER_FLAGS = ("--speculative-algorithm",)  # compared as SGLang does: upper-cased

PARSER_CHECK_SOURCE = r"""
import argparse, json, sys
REGISTRY_FLAGS = __REGISTRY_FLAGS__
UPPER_FLAGS = __UPPER_FLAGS__
out = {"sglang_version": None, "errors": [], "deprecated": [], "valid_flags": [], "choices": {}}
try:
    import importlib.metadata as md
    try:
        out["sglang_version"] = md.version("sglang")
    except Exception:
        import sglang
        out["sglang_version"] = getattr(sglang, "__version__", None)
    from sglang.srt.server_args import ServerArgs

    class _Stop(Exception):
        pass

    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise _Stop(message)

    parser = Parser(prog="sglang serve", add_help=False)
    ServerArgs.add_cli_args(parser)
except Exception as exc:
    out["import_error"] = "%s: %s" % (type(exc).__name__, exc)
    print(json.dumps(out))
    sys.exit(0)

argv = sys.argv[1:]
by_flag = {}
for action in parser._actions:
    for opt in action.option_strings:
        if opt.startswith("--"):
            by_flag[opt] = action
out["valid_flags"] = sorted(by_flag)
for opt, action in by_flag.items():
    if action.choices is not None:
        out["choices"][opt] = sorted(str(c) for c in action.choices)
    if "Deprecated" in type(action).__name__:
        out.setdefault("deprecated_flags", []).append(opt)

# Values argparse takes as any string but the engine accepts only from a registry of its own
# (REGISTRY_FLAGS: module, list): checked against the registry of this very install.
registries = {}
for opt, sources in REGISTRY_FLAGS.items():
    import enum, importlib
    found = None
    for mod, name in sources:
        try:
            obj = getattr(importlib.import_module(mod), name)
        except Exception:
            continue
        if isinstance(obj, type) and issubclass(obj, enum.Enum):
            items = [m.name for m in obj]
        elif isinstance(obj, dict):
            items = list(obj)
        else:
            items = list(obj)
        found = (found or set()) | {str(c) for c in items}
    if found is not None:
        registries[opt] = sorted(found)
out["registries"] = registries

i = 0
while i < len(argv):
    word = argv[i]
    i += 1
    if not word.startswith("--"):
        continue
    flag, eq, inline = word.partition("=")
    action = by_flag.get(flag)
    if action is None:
        prefixed = [f for f in by_flag if f.startswith(flag)]
        if len(prefixed) == 1:  # argparse accepts unique abbreviations
            action = by_flag[prefixed[0]]
        else:
            out["errors"].append({"kind": "unknown", "flag": flag})
            continue
    if "Deprecated" in type(action).__name__:
        out["deprecated"].append(flag)
    if action.nargs == 0:
        continue
    values = [inline] if eq else []
    while not eq and i < len(argv) and not argv[i].startswith("--"):
        values.append(argv[i])
        i += 1
        if action.nargs in (None, "?"):
            break
    if callable(action.type):
        for v in values:
            try:
                action.type(v)
            except Exception as exc:
                out["errors"].append({"kind": "value", "flag": flag, "value": v, "error": str(exc)})
    if action.choices is None and values and action.option_strings[-1] in registries:
        allowed = registries[action.option_strings[-1]]
        upper = action.option_strings[-1] in UPPER_FLAGS
        for v in values:
            if (v.upper() if upper else v) not in allowed:
                out["errors"].append({"kind": "choice", "flag": flag, "value": v, "allowed": allowed,
                                      "registry": REGISTRY_FLAGS[action.option_strings[-1]][0][1]})
    if action.choices is not None:
        for v in values:
            try:
                conv = action.type(v) if callable(action.type) else v
            except Exception:
                conv = v
            if conv not in action.choices:
                out["errors"].append({"kind": "choice", "flag": flag, "value": v,
                                      "allowed": sorted(str(c) for c in action.choices)})
try:
    parser.parse_known_args(argv)
except _Stop as exc:
    out["parser_error"] = str(exc)
except Exception as exc:
    out["parser_error"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(out))
""".replace("__REGISTRY_FLAGS__", repr(REGISTRY_FLAGS)).replace("__UPPER_FLAGS__", repr(UPPER_FLAGS))
