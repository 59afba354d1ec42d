"""`sparkctl export k8s [MODE]`: the plan as Kubernetes manifests (docs/kubernetes.md); of a fleet,
`[SERVICE:MODE[,SERVICE:MODE]]`: every service's, side by side (docs/fleet.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from sparkctl.commands._common import JsonOpt, ProfileOpt, console, handle_errors, load_profile, print_json

ModeArg = Annotated[
    str | None,
    typer.Argument(
        metavar="MODE",
        help="Mode to export (default: the profile's default mode); a fleet: SERVICE:MODE[,SERVICE:MODE], "
        "the others in their default mode.",
    ),
]
OutOpt = Annotated[Path, typer.Option("--output", "-o", help="Directory the manifests are written to.")]
NamespaceOpt = Annotated[
    str, typer.Option("--namespace", metavar="NAMESPACE", help="Namespace of every object.")
]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the manifests on stdout; write nothing.")]
SecretsOpt = Annotated[
    bool,
    typer.Option(
        "--secrets",
        help="Print only the Secret the pods mount, with its values, for a pipe: "
        "`sparkctl export k8s MODE --secrets | kubectl apply -f -` (refused on a terminal).",
    ),
]
RdmaResourceOpt = Annotated[
    str | None,
    typer.Option(
        "--rdma-resource",
        help="Request the RDMA devices from this device-plugin resource (e.g. rdma/rdma_shared_device_a) "
        "instead of a hostPath of the device directory.",
    ),
]


@handle_errors
def k8s(
    mode: ModeArg = None,
    output: OutOpt = Path("k8s"),
    namespace: NamespaceOpt = "default",
    profile: ProfileOpt = None,
    dry_run: DryRunOpt = False,
    secrets: SecretsOpt = False,
    rdma_resource: RdmaResourceOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Render the plan `up` runs as Kubernetes manifests: a LeaderWorkerSet, the per-node env, the router."""
    from sparkctl.export.k8s import export_k8s

    prof = load_profile(profile, fleet=True)
    if prof.models:
        _fleet(prof, mode, output, namespace, dry_run, secrets, rdma_resource, json_out)
        return
    out = export_k8s(prof, mode, namespace, rdma_resource)
    if secrets:
        _print_secret(prof, out)
        return
    written = [] if dry_run else _write(out.files, output)
    if json_out:
        files = [{"name": n, "path": str(output / n), "objects": _kinds(out.objects[n])} for n in out.files]
        print_json({"mode": out.plan.mode, "namespace": namespace, "dry_run": dry_run, "files": files,
                    "written": written, "secret": out.secret_name, "notes": out.notes})  # fmt: skip
    elif dry_run:
        sys.stdout.write("".join(out.files.values()))
    else:
        con = console()
        for path in written:
            con.print(f"wrote {path}")
        for note in out.notes:
            con.print(f"[yellow]note:[/] {note}")
        ns = "" if namespace == "default" else f" --namespace {namespace}"
        if out.secret_name:
            con.print(f"Secret {out.secret_name} first:", soft_wrap=True)
            con.print(
                f"  sparkctl export k8s {out.plan.mode}{ns} --secrets | kubectl apply -f -", soft_wrap=True
            )
        con.print(f"then: kubectl apply -f {output}", soft_wrap=True)


def _fleet(prof, selection, output, namespace, dry_run, secrets, rdma_resource, json_out) -> None:
    """`export k8s` of a fleet: each service's objects as its own export renders them."""
    from sparkctl.export.k8s_fleet import export_fleet

    out = export_fleet(prof, selection, namespace, rdma_resource)
    if secrets:
        _print_fleet_secrets(prof, out)
        return
    written = [] if dry_run else _write(out.files, output)
    if json_out:
        files = [{"name": n, "path": str(output / n), "objects": _kinds(out.objects[n])} for n in out.files]
        services = [{"name": s.service, "mode": s.plan.mode, "secret": s.secret_name} for s in out.services]
        print_json({"selection": out.selection, "services": services, "namespace": namespace,
                    "dry_run": dry_run, "files": files, "written": written, "notes": out.notes})  # fmt: skip
        return
    if dry_run:
        sys.stdout.write("".join(out.files.values()))
        return
    con = console()
    for path in written:
        con.print(f"wrote {path}")
    for note in out.notes:
        con.print(f"[yellow]note:[/] {note}")
    if names := [s.secret_name for s in out.services if s.secret_name]:
        ns = "" if namespace == "default" else f" --namespace {namespace}"
        con.print(f"Secrets {', '.join(names)} first:", soft_wrap=True)
        con.print(f"  sparkctl export k8s {out.selection}{ns} --secrets | kubectl apply -f -", soft_wrap=True)
    con.print(f"then: kubectl apply -f {output}", soft_wrap=True)


def _kinds(docs: list[dict]) -> list[str]:
    return [f"{d['kind']}/{d['metadata']['name']}" for d in docs]


def _write(files: dict[str, str], output: Path) -> list[str]:
    output.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in files.items():
        path = output / name
        path.write_text(text)
        paths.append(str(path))
    return paths


def _print_secret(prof, out) -> None:  # Profile, K8sExport (imported lazily)
    from sparkctl.errors import UsageError
    from sparkctl.export.yamltext import dump

    if out.secret_name is None:
        raise UsageError(f"mode {out.plan.mode} has no secrets", fix="the manifests need no Secret")
    _refuse_a_terminal(out.plan.mode)
    sys.stdout.write(dump([_secret(prof, out, {"sparkctl.cluster": prof.cluster})], []))


def _print_fleet_secrets(prof, out) -> None:  # Profile, FleetK8sExport: one Secret per service
    from sparkctl.errors import UsageError
    from sparkctl.export.yamltext import dump
    from sparkctl.profile.fleet import service_profile

    keyed = [s for s in out.services if s.secret_name]
    if not keyed:
        raise UsageError(f"{out.selection} has no secrets", fix="the manifests need no Secret")
    _refuse_a_terminal(out.selection)
    docs = [
        _secret(
            service_profile(prof, s.service),
            s,
            {"sparkctl.cluster": prof.cluster, "sparkctl.service": s.service},
        )
        for s in keyed
    ]
    sys.stdout.write(dump(docs, []))


def _refuse_a_terminal(selector: str) -> None:
    from sparkctl.errors import UsageError

    if sys.stdout.isatty():
        raise UsageError(
            "--secrets prints secret values: refused on a terminal",
            fix=f"pipe it: sparkctl export k8s {selector} --secrets | kubectl apply -f -",
        )


def _secret(prof, out, labels: dict[str, str]) -> dict:  # Profile, K8sExport -> the Secret, with values
    from sparkctl.connectors import NodePool
    from sparkctl.export.k8s_secret import secret_manifest, secret_values

    with NodePool(prof) as pool:
        values = secret_values(out.plan, pool.get)
    return secret_manifest(out.secret_name, out.namespace, labels, values)


def register(app: typer.Typer) -> None:
    from sparkctl.commands._common import add_group

    add_group(app, "export", "Export the plan to another scheduler (Kubernetes).", {"k8s": k8s})
