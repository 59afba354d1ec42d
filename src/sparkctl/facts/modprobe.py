"""Kernel module settings (modprobe.d): the files and their `options` lines for the NVIDIA modules.

A `zz-nvidia-drm-override.conf` in modprobe.d has left CUDA seeing about half of a GB10's unified
memory (about 62 GB, reported on two-Spark deployments): every memory budget is then wrong by half.
The probe prints each modprobe.d `*.conf` that names an nvidia module, with a marker line per file.
"""

from __future__ import annotations

from sparkctl.facts.probe import Probe, checked, sh_argv

MARK = "#sparkctl-modprobe"
DIRS = (
    "/etc/modprobe.d",
    "/run/modprobe.d",
    "/usr/local/lib/modprobe.d",
    "/usr/lib/modprobe.d",
    "/lib/modprobe.d",
)
OVERRIDE = "zz-nvidia-drm-override.conf"
SCRIPT = f"""for d in "$@"; do
  for f in "$d"/*.conf; do
    [ -r "$f" ] || continue
    case "$(basename "$f")" in {OVERRIDE}) ;; *) grep -qi nvidia "$f" || continue ;; esac
    echo "{MARK} $f"; grep -v '^[[:space:]]*#' "$f"
  done
done
echo "{MARK} end"
"""


def parse_modprobe(text: str) -> dict[str, list[str]]:
    """{file: its non-comment, non-empty lines}."""
    out: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        if line.startswith(MARK):
            name = line[len(MARK) :].strip()
            current = None if name == "end" else name
            if current is not None:
                out[current] = []
        elif current is not None and line.strip():
            out[current].append(line.strip())
    return out


def modprobe_probe() -> Probe:
    return Probe(tuple(sh_argv(SCRIPT, *DIRS)), checked("reading modprobe.d", parse_modprobe))
