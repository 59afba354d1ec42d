"""A YAML document composed and checked before anything constructs it (issue 42): aliases
bounded (nested aliases multiply), numbers that fit, no key given twice, and the line of every
key path, for the errors of yaml_model and for refusals found after a profile loaded."""

from __future__ import annotations

import math
import re

import yaml

Loc = tuple[str | int, ...]


class DuplicateKey(Exception):
    """A key given twice in one mapping (YAML loaders keep the last one silently)."""

    def __init__(self, loc: Loc, first: int, second: int) -> None:
        super().__init__(loc)
        self.loc, self.first, self.second = loc, first, second


MAX_ALIASED_NODES = 10_000  # what aliases may add to a document; a profile's anchors add dozens


ALIAS_FIX = "write the values out, or use a few anchors (&name) and aliases (*name) that do not nest"
MAX_INT_DIGITS = 19  # 2**63 has 19: every count, port and size of a profile fits in far fewer


class Refused(Exception):
    """A composed document refused before it is constructed: its line, why, and the fix."""

    def __init__(self, line: int, why: str, fix: str = ALIAS_FIX) -> None:
        super().__init__(why)
        self.line, self.why, self.fix = line, why, fix


class AliasBomb(Refused):
    """Aliases that expand past the bound (nested aliases: each level multiplies) or into themselves."""


def _check_number(node: yaml.ScalarNode) -> None:
    """An int of thousands of digits was a ValueError traceback (Python's int() digit limit), one
    of 30 digits a GPU count; .nan, .inf and 1e999 reach no engine flag as a number it can use."""
    line, text = node.start_mark.line + 1, node.value.replace("_", "")
    if node.tag == "tag:yaml.org,2002:int" and len(text.lstrip("+-")) > MAX_INT_DIGITS:
        raise Refused(
            line,
            f"a number of {len(text.lstrip('+-'))} digits ({text[:12]}...); numbers here fit in 64 bits",
            fix="give the real value (a count, a port, a size), or quote it if it is a name",
        )
    if node.tag == "tag:yaml.org,2002:float":
        try:
            finite = "inf" not in text.lower() and "nan" not in text.lower() and math.isfinite(float(text))
        except ValueError:  # YAML 1.1's sexagesimal 1:30.5: a finite number
            finite = True
        if not finite:
            raise Refused(
                line,
                f"{node.value} is not a finite number",
                fix="give a finite value (e.g. 0.8), or quote it if it is a name",
            )


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def check_aliases(root: yaml.Node) -> None:
    """Refuse a composed document whose aliases expand past MAX_ALIASED_NODES or refer to a node
    that contains them, before anything (the constructor, pydantic) expands them. The composed
    graph shares aliased nodes, so this walk is linear in the file: each node's expanded size is
    computed once, iteratively (no recursion for a deep document to exhaust)."""
    size: dict[int, int] = {}
    unique = 0
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    open_: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in _children(node))
            if size[key] - unique > MAX_ALIASED_NODES:
                raise AliasBomb(
                    node.start_mark.line + 1,
                    f"aliases expand this document past {MAX_ALIASED_NODES} values (nested aliases)",
                )
            continue
        if key in size:
            continue
        if key in open_:
            raise AliasBomb(node.start_mark.line + 1, "an alias refers to a value that contains it")
        open_.add(key)
        unique += 1
        stack.append((node, True))
        for child in reversed(_children(node)):
            if id(child) in open_:
                raise AliasBomb(child.start_mark.line + 1, "an alias refers to a value that contains it")
            stack.append((child, False))


def line_index(root: yaml.Node) -> dict[Loc, int]:
    """Map every key path to its 1-based line (keys point at the key, items at the item). An
    aliased node is indexed where it is defined only: following aliases costs their expansion."""
    out: dict[Loc, int] = {}
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, Loc]] = [(root, ())]
    while stack:
        node, loc = stack.pop()
        out.setdefault(loc, node.start_mark.line + 1)
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            _check_number(node)
        elif isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.tag)
                if loc + (key,) in out and key != "<<":
                    raise DuplicateKey(loc + (key,), out[loc + (key,)], key_node.start_mark.line + 1)
                out[loc + (key,)] = key_node.start_mark.line + 1
                stack.append((value_node, loc + (key,)))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                out[loc + (i,)] = item.start_mark.line + 1
                stack.append((item, loc + (i,)))
    return out


# A refusal found after loading names its key path first: "engine.args.port: 'port' is set by ..."
KEY_PATH = re.compile(r"([A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-]+|\[\d+\])*): ")


def key_lines(text: str) -> dict[Loc, int]:
    """The line of every key path of YAML text that already loaded (the index follows no alias:
    linear in the file); empty when it does not compose."""
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
        try:
            root = loader.get_single_node()
        finally:
            loader.dispose()
        return line_index(root) if root is not None else {}
    except (yaml.YAMLError, DuplicateKey, Refused):
        return {}


def key_line(text: str, message: str, lines: dict[Loc, int] | None = None) -> int | None:
    """The 1-based line of the key path a message starts with (`lines`: key_lines(text), when
    already read), or None when no key of the file is named."""
    head = KEY_PATH.match(message)
    if head is None:
        return None
    return (key_lines(text) if lines is None else lines).get(parse_loc(head.group(1)))


def parse_loc(text: str) -> Loc:
    parts: list[str | int] = []
    for piece in re.split(r"\.", text):
        name, *idx = re.split(r"\[(\d+)\]", piece)
        if name:
            parts.append(name)
        parts.extend(int(i) for i in idx if i)
    return tuple(parts)
