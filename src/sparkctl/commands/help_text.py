"""What `--help` shows at 80 columns: a short summary per command (the command list never cuts
one with `...`) and an example at the end of each command's own help. One table, applied to the
app after every command module registered itself (cli.py)."""

from __future__ import annotations

import typer

# name -> (summary of at most 60 characters, example)
HELP: dict[str, tuple[str, str]] = {
    "init": ("Discover the nodes and write a profile", "sparkctl init --peer spark@spark2.local"),
    "plan": ("Show exactly what runs per rank (--check: launch rules)", "sparkctl plan tp2 --check"),
    "fit": (
        "Predict memory and check the flags with the engine's parser",
        "sparkctl fit tp2 --allow-missing",
    ),
    "preflight": ("Check every node of MODE before up (SSH, fabric, GPUs)", "sparkctl preflight tp2 -v"),
    "ship": ("Copy the image and weights a node lacks", "sparkctl ship tp2 --dry-run"),
    "up": ("Start MODE, watch every rank, roll back on failure", "sparkctl up tp2"),
    "down": ("Stop and remove this cluster's containers", "sparkctl down --dry-run"),
    "switch": ("Switch to MODE (rolling with replicas)", "sparkctl switch solo"),
    "upgrade": ("Restart the running mode onto the current profile", "sparkctl upgrade --no-rolling"),
    "status": ("What runs where, and whether it serves", "sparkctl status --json"),
    "logs": ("Rank and router logs, merged in time order", "sparkctl logs tp2 -f --rank 1"),
    "supervise": ("Restart what exits, with backoff and a limit", "sparkctl supervise tp2 --detach"),
    "persist": (
        "systemd units that bring MODE back after a reboot",
        "sparkctl persist install tp2 --dry-run",
    ),
    "install": (
        "Show, write and enable the units",
        "sparkctl persist install tp2 --env-file ~/.sparkctl.env",
    ),
    "persist-status": ("Whether each node holds the units, enabled", "sparkctl persist status tp2"),
    "remove": ("Stop and delete every unit persist wrote", "sparkctl persist remove"),
    "diagnose": ("One masked tarball of the cluster's facts and logs", "sparkctl diagnose tp2 -o bug.tar.gz"),
    "top": ("Live engine, GPU, memory and fabric metrics", "sparkctl top tp2 --once --json"),
    "verify": ("Check the endpoint against the OpenAI API", "sparkctl verify tp2"),
    "bench": ("TTFT, ITL, tokens/s; compare two runs", "sparkctl bench tp2 --budget 60"),
    "fabric-test": ("All-reduce/all-gather bandwidth between the ranks", "sparkctl fabric-test tp2"),
    "profile": ("Validate a profile, touching no node", "sparkctl profile -p sparkctl.yaml check"),
    "check": ("Validate the profile, touching no node", "sparkctl profile check -p sparkctl.yaml"),
    "image": ("Build and verify derivative serving images", "sparkctl image build RECIPE --node spark1"),
    "build": ("Build RECIPE's image from its pinned base", "sparkctl image build RECIPE --node spark1"),
    "verify-image": ("Verify RECIPE's image", "sparkctl image verify RECIPE --node spark1"),
    "export": ("Export the plan to another scheduler (Kubernetes)", "sparkctl export k8s tp2"),
    "k8s": ("The plan as Kubernetes manifests", "sparkctl export k8s tp2 -o k8s/"),
}


def _example(text: str) -> str:
    return f"Example:\n\n\b\n  {text}"  # \b: click keeps the line as it is


def _apply(commands, sub: bool = False) -> None:
    for info in commands:
        name = info.name or ""
        key = {"verify": "verify-image", "status": "persist-status"}.get(name, name) if sub else name
        if key in HELP:
            info.short_help, example = HELP[key][0], HELP[key][1]
            info.epilog = _example(example)


def apply(app: typer.Typer) -> None:
    _apply(app.registered_commands)
    for group in app.registered_groups:
        if group.name in HELP:
            group.short_help = HELP[group.name][0]
        _apply(group.typer_instance.registered_commands, sub=True)
