"""`export k8s` of a fleet (pure): each service exported as a single-model profile is
(`export_k8s` with its `service`: its own LeaderWorkerSet, gateway sidecar, Service, ConfigMaps,
Secret and, with replicas, router), every object's name, label and file carrying the service, all
in one set of files; and the fleet's one endpoint in front of them, routing by the request's
`model` to each service's Service (export/k8s_fleet_gateway.py, docs/kubernetes.md "A fleet").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkctl.errors import UsageError
from sparkctl.export.k8s import K8sExport, export_k8s
from sparkctl.export.k8s_fleet_gateway import FILE as GATEWAY_FILE
from sparkctl.export.k8s_fleet_gateway import fleet_gateway
from sparkctl.export.yamltext import dump
from sparkctl.planning.fleet import plan_fleet
from sparkctl.profile.fleet import service_profile
from sparkctl.profile.schema import Profile


@dataclass
class FleetK8sExport:
    namespace: str
    services: list[K8sExport]
    objects: dict[str, list[dict]] = field(default_factory=dict)  # file name -> documents
    files: dict[str, str] = field(default_factory=dict)  # file name -> YAML text
    notes: list[str] = field(default_factory=list)

    @property
    def selection(self) -> str:
        """The SERVICE:MODE list that exports these services in these modes again."""
        return ",".join(s.selector for s in self.services)


def export_fleet(
    profile: Profile, selection: str | None, namespace: str = "default", rdma_resource: str | None = None
) -> FleetK8sExport:
    """Every service of the fleet in its selected mode (default: its default mode); refused, as
    `plan` refuses it, when the services' memory does not fit a node."""
    fleet = plan_fleet(profile, selection)
    outs = [export_k8s(profile, s.mode, namespace, rdma_resource, service=s.name) for s in fleet.services]
    out = merge(namespace, outs)
    views = {s.name: service_profile(profile, s.name) for s in fleet.services}
    gate = fleet_gateway(profile, namespace, outs, views)
    out.objects[GATEWAY_FILE] = gate.docs
    out.files[GATEWAY_FILE] = dump(gate.docs, _gateway_header(profile, out, gate.spec.keyed))
    out.notes.extend(gate.notes)
    return out


def _gateway_header(profile: Profile, out: FleetK8sExport, keyed: bool) -> list[str]:
    lines = [
        f"sparkctl export k8s {out.selection}: cluster {profile.cluster}, the fleet's one endpoint on port "
        f"{profile.gateway.port}",
        "(HAProxy routing by the request's `model` to each service's Service); docs/kubernetes.md",
    ]
    if keyed:
        lines.append("its key hashes: the services' Secrets (`--secrets`), joined by its init container")
    return lines


def merge(namespace: str, outs: list[K8sExport]) -> FleetK8sExport:
    """The services' files in one export; refused if two objects of a kind share a name."""
    out = FleetK8sExport(namespace, outs)
    owner: dict[tuple[str, str], str] = {}
    for one in outs:
        for file, docs in one.objects.items():
            for doc in docs:
                key = (doc["kind"], doc["metadata"]["name"])
                if key in owner:
                    raise UsageError(
                        f"{key[0]} {key[1]} of service {one.service} is also service {owner[key]}'s",
                        fix="give the services distinct names in models: (each object carries its service's)",
                    )
                owner[key] = one.service or ""
            out.objects[file], out.files[file] = docs, one.files[file]
    out.notes.extend(notes(outs))
    return out


def notes(outs: list[K8sExport]) -> list[str]:
    """The services' notes, once each; one that holds for some services only names them."""
    out: list[str] = []
    for note in dict.fromkeys(n for one in outs for n in one.notes):
        whose = [one.service or "" for one in outs if note in one.notes]
        out.append(note if len(whose) == len(outs) else f"{', '.join(whose)}: {note}")
    return out
