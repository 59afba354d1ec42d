"""The strict unified-diff applier used by image recipes."""

from __future__ import annotations

import pytest

from sparkctl.recipes.patch import PatchError, apply

BASE = b"".join(f"line {i}\n".encode() for i in range(1, 11))
DIFF = b"""--- a/f.py
+++ b/f.py
@@ -3,3 +3,4 @@
 line 3
-line 4
+line four
+line 4.5
 line 5
@@ -9,2 +10,2 @@
 line 9
-line 10
+line ten
"""


def test_applies_and_reverses() -> None:
    new = apply(BASE, DIFF)
    assert new.splitlines()[2:6] == [b"line 3", b"line four", b"line 4.5", b"line 5"]
    assert new.endswith(b"line 9\nline ten\n")
    assert apply(new, DIFF, reverse=True) == BASE


def test_refuses_a_hunk_that_moved() -> None:
    # The same context two lines further down: `patch` and `git apply` would apply it (offset).
    moved = b"extra 1\nextra 2\n" + BASE
    with pytest.raises(PatchError, match=r"hunk 1 \(@@ -3,3 \+3,4 @@\) does not apply at line 3"):
        apply(moved, DIFF)


def test_refuses_changed_context_naming_the_line() -> None:
    changed = BASE.replace(b"line 5\n", b"line FIVE\n")
    with pytest.raises(PatchError, match=r"line 5 is 'line FIVE', the patch expects 'line 5'"):
        apply(changed, DIFF)


def test_refuses_a_patch_applied_twice() -> None:
    with pytest.raises(PatchError, match="does not apply"):
        apply(apply(BASE, DIFF), DIFF)


def test_no_newline_at_end_of_file() -> None:
    diff = b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"
    assert apply(b"a\nb", diff) == b"a\nc"
    assert apply(b"a\nc", diff, reverse=True) == b"a\nb"
    with pytest.raises(PatchError):
        apply(b"a\nb\n", diff)  # the base has a final newline the patch says it lacks


def test_insertion_at_the_top() -> None:
    diff = b"--- a/f\n+++ b/f\n@@ -0,0 +1 @@\n+# header\n"
    assert apply(b"x\n", diff) == b"# header\nx\n"


@pytest.mark.parametrize(
    ("diff", "message"),
    [
        (b"just text\n", "no hunks"),
        (
            b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n--- a/y\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n",
            "exactly one file",
        ),
        (b"--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n+c\n", "truncated"),
        (b"@@ -1 +1 @@\n-a\n+b\n", "exactly one file"),
    ],
)
def test_malformed_diffs(diff: bytes, message: str) -> None:
    with pytest.raises(PatchError, match=message):
        apply(b"a\nb\nc\n", diff)
