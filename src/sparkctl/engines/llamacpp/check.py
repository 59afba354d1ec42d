"""llama.cpp's launch safety: every flag of rank 0's argv checked against llama-server's options.

llama-server has no parse-only mode, so the options come from its `--help` (one option a line at
column 0: `-c,    --ctx-size N    help...`): run in the image on rank 0's node when it answers (no
network, no GPU, removed after), else the list of the release sparkctl was built against
(cli_flags.py, taken from the same `--help`). A name it does not know is an ERROR (llama-server
would exit at start with "invalid argument"), with the nearest option as the fix. Values are
llama-server's to judge: sparkctl checks names only, and plans no memory (no MemoryModel).
"""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING

from sparkctl.engines.base import launcher
from sparkctl.engines.llamacpp import flags as F
from sparkctl.findings import Finding, Severity

if TYPE_CHECKING:
    from sparkctl.connectors.pool import NodePool
    from sparkctl.engines.base import LaunchTarget
    from sparkctl.engines.support.launch_check import LaunchCheck, LaunchRequest
    from sparkctl.profile.schema import Profile

FLAGS = "LlamaCppFlags"
CHECK_NAMES = frozenset({FLAGS})
HELP_TIMEOUT_S = 30.0
_HELP_COLUMN = 40  # common/arg.cpp: an option's help starts here, unless its names ran past 37
_OPTION = re.compile(r"(?<![\w-])--([a-z0-9][a-z0-9.-]*[a-z0-9])")


def help_options(text: str) -> frozenset[str]:
    """The long options (no dashes) of a `llama-server --help`: the names column of each option line."""
    out: set[str] = set()
    for line in text.splitlines():
        if not line.startswith("-") or line.startswith("---"):
            continue  # a help line's continuation, a heading (----- common params -----), prose
        names_ran_past = line[_HELP_COLUMN - 3 : _HELP_COLUMN] != "   "  # the names alone on the line
        head = line if names_ran_past else line[:_HELP_COLUMN]
        out.update(_OPTION.findall(head))
    return frozenset(out)


def argv_flags(argv: list[str], command: list[str]) -> list[str]:
    """The long options a rank's argv passes to llama-server (after its launcher; `--k=v` as `k`)."""
    return [w[2:].partition("=")[0] for w in argv[len(command) :] if w.startswith("--") and len(w) > 2]


def unknown_findings(flags: list[str], known: frozenset[str], source: str, node: str) -> list[Finding]:
    out = []
    for flag in dict.fromkeys(flags):
        if flag in known:
            continue
        near = difflib.get_close_matches(flag, sorted(known), n=1)
        fix = f"--{near[0]}?" if near else "remove it"
        out.append(
            Finding(
                FLAGS,
                Severity.ERROR,
                f"--{flag} is not a llama-server option ({source}): it would exit at start",
                fix=f"engine.args / modes.<mode>.args: {fix} (`llama-server --help` lists them)",
                node=node,
                rank=0,
            )
        )
    return out or [Finding(FLAGS, Severity.OK, f"llama-server knows every flag of rank 0 ({source})")]


def image_options(plan: LaunchTarget, program: str, pool: NodePool) -> tuple[frozenset[str] | None, str]:
    """The options of the image's own llama-server (None, and why: not asked)."""
    from sparkctl.engines.support.in_image import InImageError, image_runner
    from sparkctl.errors import ConnectError

    rank0 = plan.ranks[0]
    what = "llama-server --help"
    try:
        run = image_runner(
            pool.get(rank0.node), rank0.image, node=rank0.node, what=what, timeout_s=HELP_TIMEOUT_S
        )
        code, out, err = run([program, "--help"])
    except (InImageError, ConnectError) as exc:
        return None, str(exc)
    known = help_options(out + "\n" + err)
    if not known:
        return None, f"`{program} --help` in {rank0.image} listed no options (exit code {code})"
    return known, f"the options of {rank0.image}'s llama-server"


def flag_findings(plan: LaunchTarget, profile: Profile, pool: NodePool | None) -> list[Finding]:
    from sparkctl.engines.llamacpp.cli_flags import CLI_FLAGS, RELEASE

    command = launcher(profile, F.DEFAULT_COMMAND)
    rank0 = plan.ranks[0]
    flags = argv_flags(rank0.argv, command)
    static = f"llama.cpp {RELEASE}'s options; the image's own were not asked"
    if pool is None:
        return unknown_findings(flags, CLI_FLAGS, static, rank0.node)
    known, source = image_options(plan, command[0], pool)
    if known is None:
        note = Finding(FLAGS, Severity.WARN, f"the image's llama-server not asked: {source}", node=rank0.node)
        return [note, *unknown_findings(flags, CLI_FLAGS, static, rank0.node)]
    return unknown_findings(flags, known, source, rank0.node)


def launch_check(plan: LaunchTarget, profile: Profile, request: LaunchRequest) -> LaunchCheck:
    """`fit` and `plan --check`: the image's options when rank 0's node answers, else the release's."""
    from sparkctl.engines.support.launch_check import LaunchCheck
    from sparkctl.errors import ConnectError

    if request.reach and request.parse_flags:
        from sparkctl.connectors import NodePool

        try:
            with NodePool(profile) as pool:
                return LaunchCheck(findings=flag_findings(plan, profile, pool))
        except ConnectError:
            pass  # unreachable: judged against the release's options below
    return LaunchCheck(findings=flag_findings(plan, profile, None))
