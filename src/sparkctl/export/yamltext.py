"""YAML text of the exported objects: pyyaml's safe_dump (keys in the order they were built,
so the same plan gives the same bytes), a header and comments above chosen keys."""

from __future__ import annotations

import yaml


class _Dumper(yaml.SafeDumper):
    """No anchors/aliases (each object spelled out); multi-line strings as literal blocks."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(docs: list[dict], header: list[str], comments: dict[str, str] | None = None) -> str:
    """Documents separated by `---`; each `comments` key gets its comment above its first line."""
    body = "---\n".join(
        yaml.dump(d, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100) for d in docs
    )
    lines = body.splitlines()
    for key, comment in (comments or {}).items():
        for i, line in enumerate(lines):
            if line.lstrip().startswith(f"{key}:"):
                indent = line[: len(line) - len(line.lstrip())]
                lines[i:i] = [f"{indent}# {part}" for part in comment.split("\n")]
                break
    return "".join(f"# {h}\n" if h else "#\n" for h in header) + "---\n" + "\n".join(lines) + "\n"
