"""Apply a one-file unified diff to bytes, strictly: every hunk at its stated line, exact context.

Why not `patch` or `git apply`: both search for a hunk's context near its line (`patch` even with
fuzz), so a patch written for one release can "apply" to another and silently change the wrong
code. A recipe's base is pinned, so any drift means the base is not the file the patch was
written for: refuse, naming the hunk. Pure (bytes in, bytes out), so no temp files and no host
tools are involved.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

HUNK_RE = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
NO_NEWLINE = b"\\ No newline at end of file"


class PatchError(ValueError):
    """The diff is malformed or does not apply exactly; the message names the hunk."""


@dataclass
class Hunk:
    old_start: int
    new_start: int
    header: str
    old: list[bytes] = field(default_factory=list)  # lines with their line ends
    new: list[bytes] = field(default_factory=list)


def parse(diff: bytes) -> list[Hunk]:
    """The hunks of a unified diff that changes exactly one file."""
    hunks: list[Hunk] = []
    files = 0
    lines = diff.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ "):
            files += 1
            i += 2
            continue
        m = HUNK_RE.match(line)
        if not m:
            i += 1  # preamble (diff --git, index, comments)
            continue
        if files != 1:
            raise PatchError(
                "a recipe patch must change exactly one file (one ---/+++ pair before its hunks)"
            )
        old_n = int(m[2]) if m[2] is not None else 1
        new_n = int(m[4]) if m[4] is not None else 1
        hunk = Hunk(int(m[1]), int(m[3]), line.rstrip(b"\r\n").decode(errors="replace"))
        i += 1
        last: list[bytes] | None = None
        while i < len(lines) and (
            len(hunk.old) < old_n or len(hunk.new) < new_n or lines[i].startswith(b"\\")
        ):
            body = lines[i]
            tag, text = body[:1], body[1:]
            if body.rstrip(b"\r\n") == NO_NEWLINE:
                for seq in (hunk.old, hunk.new) if last is None else (last,):
                    if seq:
                        seq[-1] = seq[-1].rstrip(b"\n")
                last = None
                i += 1
                continue
            if tag == b" " or body in (b"\n",):  # some tools drop the space of empty context lines
                text = text if tag == b" " else b"\n"
                hunk.old.append(text)
                hunk.new.append(text)
                last = None
            elif tag == b"-":
                hunk.old.append(text)
                last = hunk.old
            elif tag == b"+":
                hunk.new.append(text)
                last = hunk.new
            else:
                raise PatchError(f"{hunk.header}: unexpected line {body[:60]!r} inside the hunk")
            i += 1
        if len(hunk.old) != old_n or len(hunk.new) != new_n:
            raise PatchError(f"{hunk.header}: hunk is truncated (line counts do not match its header)")
        hunks.append(hunk)
    if files > 1:
        raise PatchError("a recipe patch must change exactly one file; this one changes several")
    if not hunks:
        raise PatchError("no hunks found: not a unified diff")
    return hunks


def apply(original: bytes, diff: bytes, *, reverse: bool = False) -> bytes:
    """`original` with the diff applied (or un-applied); PatchError unless every hunk matches exactly."""
    src = original.splitlines(keepends=True)
    out: list[bytes] = []
    pos = 0  # next unconsumed line of src (0-based)
    for n, hunk in enumerate(parse(diff), 1):
        old, new = (hunk.new, hunk.old) if reverse else (hunk.old, hunk.new)
        start = hunk.new_start if reverse else hunk.old_start
        # A pure insertion's start names the line *after which* it goes (0 = top of file).
        at = start if not old else start - 1
        if at < pos:
            raise PatchError(f"hunk {n} ({hunk.header}) overlaps the previous hunk")
        if src[at : at + len(old)] != old:
            raise PatchError(
                f"hunk {n} ({hunk.header}) does not apply at line {start}: {_first_diff(src, at, old)}"
            )
        out.extend(src[pos:at])
        out.extend(new)
        pos = at + len(old)
    out.extend(src[pos:])
    return b"".join(out)


def _first_diff(src: list[bytes], at: int, expected: list[bytes]) -> str:
    for k, want in enumerate(expected):
        have = src[at + k] if at + k < len(src) else None
        if have != want:
            shown = "end of file" if have is None else repr(_text(have))
            return f"line {at + k + 1} is {shown}, the patch expects {_text(want)!r}"
    return "the file ends early"


def _text(line: bytes) -> str:
    return line.rstrip(b"\r\n").decode(errors="replace")[:80]
