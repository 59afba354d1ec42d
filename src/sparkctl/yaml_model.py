"""YAML -> strict pydantic model, with errors that name file, line and key path.

YAML is composed once to remember the line of every key, then validated by pydantic; each
pydantic error is mapped back to the nearest line and, for unknown keys, the nearest valid key.
Used for cluster profiles and image recipes.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from typing import Any, TypeVar, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from sparkctl.errors import SparkctlError, several
from sparkctl.yaml_compose import DuplicateKey, Loc, Refused, check_aliases, line_index, parse_loc

M = TypeVar("M", bound=BaseModel)


def _yaml_fix(problem: str) -> str:
    if "\t" in problem or "\\t" in problem or re.search(r"\btabs?\b", problem):
        return "indent with spaces, never tabs"
    return "fix the YAML at that line: indent with spaces, quote values containing ': ' or ' #'"


def decode_yaml(data: bytes, source: str, error: type[SparkctlError]) -> str:
    """The file's text, or one error naming the line of the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(
            f"{source}:{line}: not UTF-8 text (byte {data[exc.start]:#04x}); YAML files are UTF-8",
            fix=f"save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8 {source}`) or delete that byte",
        ) from None


def _char(character: object) -> str:
    return f"#x{character:04x}" if isinstance(character, int) else repr(character)


def _nearest_line(lines: dict[Loc, int], loc: Loc) -> int | None:
    for cut in range(len(loc), -1, -1):
        if loc[:cut] in lines:
            return lines[loc[:cut]]
    return None


def _model_at(root: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    """The pydantic model that owns the last key of `loc` (for did-you-mean on unknown keys)."""
    current: Any = root
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            if not isinstance(part, str) or part not in current.model_fields:
                return None
            current = current.model_fields[part].annotation
        elif get_origin(current) in (list, dict):
            current = get_args(current)[-1]
        else:
            return None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(tp: Any) -> Any:
    """Strip Optional/Annotated/Union-with-None down to the model type, if there is one."""
    while True:
        origin = get_origin(tp)
        if origin is typing.Annotated:
            tp = get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            models = [a for a in get_args(tp) if isinstance(a, type) and issubclass(a, BaseModel)]
            if len(models) == 1:
                return models[0]
            return tp
        else:
            return tp


def _format_loc(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


_ARMS = {"list", "dict", "str", "int", "float", "bool", "none"}  # a union's arm names in pydantic's loc
# Words users write for a key that has another name here (applied only where the target exists).
SYNONYMS = {"host": "address", "hostname": "address", "ip_address": "address", "addr": "address"}


def _homes(model: type[BaseModel], at: Loc = (), depth: int = 0) -> dict[str, list[Loc]]:
    """Every key of the model tree and where it lives (list items as [], mappings as <name>)."""
    out: dict[str, list[Loc]] = {}
    for name, field in model.model_fields.items():
        out.setdefault(name, []).append(at)
        tp = _unwrap(field.annotation)
        step: Loc = (name,)
        while get_origin(tp) in (list, dict):
            step += ("[]",) if get_origin(tp) is list else ("<name>",)
            tp = _unwrap(get_args(tp)[-1])
        if isinstance(tp, type) and issubclass(tp, BaseModel) and depth < 6:
            for key, locs in _homes(tp, at + step, depth + 1).items():
                out.setdefault(key, []).extend(locs)
    return out


def _home_text(at: Loc) -> str:
    return ".".join(str(p) for p in at).replace(".[]", "[]").replace(".<name>", ".<name>") or "the top level"


def _unknown_key_fix(root: type[BaseModel], loc: Loc) -> str | None:
    """did-you-mean: a synonym or a near key of this model; else the place the key belongs."""
    model = _model_at(root, loc[:-1])
    if model is None:
        return None
    key, valid = str(loc[-1]), list(model.model_fields)
    if SYNONYMS.get(key) in valid:
        return f"did you mean '{SYNONYMS[key]}'? (the key is '{SYNONYMS[key]}' here)"
    elsewhere = [
        at
        for at in _homes(root).get(key, [])
        if at != tuple("[]" if isinstance(p, int) else p for p in loc[:-1])
    ]
    if elsewhere:
        return f"'{key}' belongs under {_home_text(elsewhere[0])}: move it there"
    near = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    return f"did you mean '{near[0]}'?" if near else f"valid keys here: {', '.join(valid)}"


def _value_fix(root: type[BaseModel], loc: Loc, docs: str) -> str:
    """What a valid value looks like: the key's description and default from the schema."""
    model = _model_at(root, loc[:-1]) if loc else None
    field = model.model_fields.get(str(loc[-1])) if model is not None else None
    if field is None or not field.description:
        return f"correct {_format_loc(loc) or 'it'} ({docs} describes every key)"
    default = None if field.is_required() else field.get_default(call_default_factory=True)
    example = f"; default {default!r}" if default not in (None, {}, []) else ""
    return f"{_format_loc(loc)}: {field.description.rstrip('.')}{example} ({docs})"


def _missing_key_fix(root: type[BaseModel], loc: Loc) -> str:
    model = _model_at(root, loc[:-1])
    field = model.model_fields.get(str(loc[-1])) if model is not None else None
    what = f" ({field.description})" if field is not None and field.description else ""
    parent = _format_loc(loc[:-1]) if loc[:-1] else "the top level"
    return f"add `{loc[-1]}:` under {parent}{what}"


def _describe(root: type[BaseModel], err: dict[str, Any]) -> tuple[Loc, str, str | None]:
    """(key path, message, fix) for one pydantic error."""
    loc: Loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    # Errors from unions/literals carry the branch name in loc (e.g. 'literal['auto']'); drop it.
    loc = tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p in _ARMS)))
    kind = err["type"]
    if kind == "extra_forbidden":  # the last part is the user's key, whatever it holds ('0[')
        loc = (*tuple(p for p in loc if p != err["loc"][-1]), err["loc"][-1])
        return loc, f"unknown key '{loc[-1]}'", _unknown_key_fix(root, loc)
    if kind == "missing":
        return loc, f"missing required key '{loc[-1]}'", _missing_key_fix(root, loc)
    if loc and (kind == "invalid_key" or err["loc"][-1] == "[key]"):  # `2:` or `null:` as a key
        key = str(loc[-1])
        return (*loc[:-1], key), f"key {key} is not a name", f"write a name there, or quote it ('{key}':)"
    msg = err["msg"].removeprefix("Value error, ")
    if kind == "value_error":
        # Cross-reference checks name their own key path: "modes.tp2.nodes: unknown node ...".
        head, sep, rest = msg.partition(": ")
        if sep and re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+", head):
            named = parse_loc(head)  # a field's own validator names the field itself: not twice
            loc = loc if loc[-len(named) :] == named else loc + named
            msg = rest
    if (
        "input" in err
        and kind not in ("value_error", "assertion_error")
        and not isinstance(err["input"], dict | list)
    ):
        got = repr(err["input"])  # a value of 200,000 characters is not echoed whole
        msg += f" (got {got if len(got) <= 80 else got[:60] + f'... ({len(got)} characters)'})"
    return loc, msg, None


def load_yaml_model(
    text: str, source: str, model: type[M], error: type[SparkctlError], what: str, docs: str = "the docs"
) -> M:
    """Parse YAML text and validate it as `model`; errors name source:line: key.path and a fix."""
    try:
        # libyaml's parser when PyYAML has it (the pure-Python one costs ~75 us a scalar), the
        # same safe constructor either way; both refuse control characters at once
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
        try:
            root = loader.get_single_node()  # composed: aliases shared, nothing expanded yet
            if root is not None:
                check_aliases(root)  # before the constructor or pydantic expands them
                lines = line_index(root)
            data = loader.construct_document(root) if root is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        if isinstance(exc, yaml.reader.ReaderError):  # a control character: its line, not a position
            line = f":{text.count(chr(10), 0, exc.position) + 1}"
            raise error(
                f"{source}{line}: invalid YAML: a control character ({_char(exc.character)}), which YAML text "
                "may not hold",
                fix="delete it (most editors do not show it; `cat -A FILE` does)",
            ) from None
        problem = getattr(exc, "problem", None) or str(exc)
        at = text.splitlines()[mark.line] if mark and mark.line < len(text.splitlines()) else ""
        hint = problem + (" (a tab)" if "\t" in at[: mark.column + 1] else "") if mark else problem
        raise error(f"{source}{line}: invalid YAML: {problem}", fix=_yaml_fix(hint)) from None
    except Refused as bad:
        raise error(f"{source}:{bad.line}: {bad.why}", fix=bad.fix) from None
    except DuplicateKey as dup:
        raise error(
            f"{source}:{dup.second}: {_format_loc(dup.loc)}: given twice (lines {dup.first} and {dup.second}); "
            "YAML would silently keep the last one",
            fix=f"keep one of them: delete line {dup.first} or line {dup.second}",
        ) from None
    if root is None or not isinstance(data, dict):
        raise error(f"{source}: {what} must be a YAML mapping", fix="start the file with `key: value` lines")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors, generic = [], []
        by_loc: dict[Loc, list[tuple[str, str | None]]] = {}
        for err in exc.errors():
            loc, msg, fix = _describe(model, err)
            by_loc.setdefault(loc, []).append((msg, fix))
        for loc, found in by_loc.items():
            if len(found) > 1:  # a union's arms each refused it: one error naming every form
                forms = "; ".join(dict.fromkeys(m.removeprefix("Input should be ") for m, _ in found))
                found = [
                    (
                        f"none of the forms this key takes fits ({forms})",
                        f"give {_format_loc(loc)} one of them",
                    )
                ]
            msg, fix = found[0]
            line = _nearest_line(lines, loc)
            text = f"{source}:{line}: {_format_loc(loc)}: {msg}" if line else f"{source}: {msg}"
            if fix and msg.startswith(
                "unknown key"
            ):  # did you mean first: a typo is often also a missing key
                errors.append(error(text, fix=fix))
            else:
                generic.append(error(text, fix=fix or _value_fix(model, loc, docs)))
        raise several(errors + generic) from None
