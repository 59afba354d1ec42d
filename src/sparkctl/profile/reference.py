"""Render the key-by-key profile reference (docs/profile.md) from the schema itself.

Generated so the document cannot drift from what the loader accepts; a unit test compares them.
Run `python -m sparkctl.profile.reference > /tmp/ref.md` to regenerate.
"""

from __future__ import annotations

import types
import typing
from typing import Any, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from sparkctl.profile.schema import Profile

BEGIN = "<!-- BEGIN GENERATED REFERENCE -->"
END = "<!-- END GENERATED REFERENCE -->"


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is typing.Annotated:
        return _type_name(get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if origin is typing.Literal:
        return " or ".join(repr(a) for a in get_args(tp))
    if origin is list:
        return f"list of {_type_name(get_args(tp)[0])}"
    if origin is dict:
        return f"mapping of {_type_name(get_args(tp)[1])}"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _models(tp: Any) -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    for arg in get_args(tp):
        found += _models(arg)
    return found


def _default(field: Any) -> str:
    if field.default is not PydanticUndefined:
        return "" if field.default is None else f"`{field.default!r}`"
    if field.default_factory is not None:
        value = field.default_factory()
        return "" if isinstance(value, BaseModel) else f"`{value!r}`"
    return "**required**"


def render(model: type[BaseModel] = Profile, prefix: str = "", seen: set | None = None) -> str:
    seen = set() if seen is None else seen
    lines = [f"### `{prefix or 'top level'}`", "", "| key | type | default | meaning |", "|---|---|---|---|"]
    nested: list[tuple[str, type[BaseModel]]] = []
    for name, field in model.model_fields.items():
        lines.append(
            f"| `{name}` | {_type_name(field.annotation)} | {_default(field)} | {field.description or ''} |"
        )
        for sub in _models(field.annotation):
            origin = get_origin(field.annotation)
            suffix = "[]" if origin is list or "list of" in _type_name(field.annotation) else ""
            suffix = ".<name>" if "mapping of" in _type_name(field.annotation) else suffix
            nested.append((f"{prefix + '.' if prefix else ''}{name}{suffix}", sub))
    out = "\n".join(lines) + "\n"
    for path, sub in nested:
        if sub not in seen:
            seen.add(sub)
            out += "\n" + render(sub, path, seen)
    return out


def generated_section() -> str:
    return f"{BEGIN}\n{render()}{END}"


if __name__ == "__main__":
    print(generated_section())
