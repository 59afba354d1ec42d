"""`export k8s` of a fleet (pure): each service exported as a single-model profile is
(`export_k8s` with its `service`: its own LeaderWorkerSet, gateway sidecar, Service, ConfigMaps,
Secret and, with replicas, router), every object's name, label and file carrying the service, all
in one set of files. Not rendered yet: the fleet's one endpoint that routes by the request's
`model`; each service has its own Service (docs/fleet.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkctl.errors import UsageError
from sparkctl.export.k8s import K8sExport, export_k8s
from sparkctl.planning.fleet import plan_fleet
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
    return merge(namespace, outs)


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
    out.notes.append(endpoint_note(outs))
    return out


def notes(outs: list[K8sExport]) -> list[str]:
    """The services' notes, once each; one that holds for some services only names them."""
    out: list[str] = []
    for note in dict.fromkeys(n for one in outs for n in one.notes):
        whose = [one.service or "" for one in outs if note in one.notes]
        out.append(note if len(whose) == len(outs) else f"{', '.join(whose)}: {note}")
    return out


def endpoint_note(outs: list[K8sExport]) -> str:
    """What serves each service: its own Service; the fleet's single endpoint is not rendered."""
    where = []
    for one in outs:
        services = [d for docs in one.objects.values() for d in docs if d["kind"] == "Service"]
        model = one.plan.endpoint.served_model_name
        if services:
            svc = services[-1]  # the router's Service when there is one: the service's endpoint
            port = svc["spec"]["ports"][0]["port"]
            where.append(f"{one.service} (model {model}): Service {svc['metadata']['name']} port {port}")
        else:
            where.append(f"{one.service} (model {model}): no Service, its router binds a node's address")
    return (
        "the fleet's single endpoint (one address routing by the request's `model`) is not rendered yet: "
        "each service has its own Service: " + "; ".join(where)
    )
