"""lifecycle/fleet_status.py: a service's state in one word (loaded, loading, unknown,
idle-stopped, stopped) from its own status and the gateway's view, and the fleet's JSON and gateway line."""

from __future__ import annotations

import types

import pytest

from sparkctl.clients.fleet import ServiceView
from sparkctl.errors import SparkctlError
from sparkctl.lifecycle import fleet_gateway
from sparkctl.lifecycle import fleet_status as fs
from sparkctl.lifecycle.fleet_status import FleetStatus, ServiceStatus, gateway_view, operator_key
from sparkctl.lifecycle.status import ClusterStatus, ModeStatus
from sparkctl.profile import load_profile_text
from sparkctl.runtime.containers import ContainerInfo
from sparkctl.runtime.readiness import EndpointHealth

READY = EndpointHealth(models_ok=True, served=["m"], health_ok=True, detail="ok")
STARTING = EndpointHealth(models_ok=False, health_ok=True, detail="/v1/models: 503")


def container(status: str) -> ContainerInfo:
    labels = {"sparkctl.cluster": "c-chat", "sparkctl.mode": "solo", "sparkctl.rank": "0"}
    return ContainerInfo(
        "a", "sparkctl-c-chat-solo-r0", "id0", status, None, False, None, None, "img", "sha", labels
    )


def cluster(health: EndpointHealth | None = None, *states: str) -> ClusterStatus:
    modes = [ModeStatus("solo", None, [], health, None)] if health is not None else []
    return ClusterStatus("c-chat", ["a"], [container(s) for s in states], modes=modes)


@pytest.mark.parametrize(
    ("status", "on_demand", "seen", "state"),
    [
        (cluster(READY, "running"), False, None, "loaded"),
        (cluster(READY, "running"), True, ServiceView("chat", True), "loaded"),
        (cluster(STARTING, "running"), True, None, "loading"),  # runs, does not answer yet
        (cluster(), True, ServiceView("chat", False, waiting=1), "loading"),  # a request waits for it
        (cluster(), True, ServiceView("chat", False), "idle-stopped"),
        (cluster(STARTING, "exited"), True, None, "idle-stopped"),  # an exited container: not running
        (cluster(), False, None, "stopped"),
        (cluster(STARTING, "exited"), False, ServiceView("chat", False), "stopped"),
    ],
)
def test_a_services_state_in_one_word(status, on_demand, seen, state) -> None:
    assert ServiceStatus("chat", on_demand, status, seen).state == state


def test_a_service_on_a_node_nobody_could_ask_is_unknown_not_stopped() -> None:
    lost = cluster()
    lost.unreachable = {"a": "Docker is not running"}
    assert ServiceStatus("chat", False, lost).state == "unknown"
    assert (
        ServiceStatus("chat", True, lost, ServiceView("chat", True)).state == "loaded"
    )  # the gateway saw it


def test_one_ready_mode_of_several_is_loaded() -> None:
    st = cluster(STARTING, "running")
    st.modes.append(ModeStatus("tp2", None, [], READY, None))
    assert ServiceStatus("chat", False, st).state == "loaded"


def test_a_services_json_carries_its_state_and_the_gateways_view_beside_its_status() -> None:
    seen = ServiceView("chat", False, waiting=2, requests=9, last_request_age_s=4.5, on_demand=True)
    doc = ServiceStatus("chat", True, cluster(), seen).to_json()
    assert (doc["name"], doc["state"], doc["on_demand"]) == ("chat", "loading", True)
    assert doc["gateway"] == {"loaded": False, "waiting": 2, "requests": 9, "idle_s": 4.5}
    assert doc["cluster"] == "c-chat" and doc["modes"] == []  # its own status, merged in


def test_without_the_gateways_view_the_json_says_none() -> None:
    doc = ServiceStatus("chat", False, cluster(READY, "running")).to_json()
    assert doc["gateway"] is None and doc["state"] == "loaded"
    assert [c["status"] for c in doc["containers"]] == ["running"]


def test_the_fleets_json_lists_its_services_and_its_endpoint() -> None:
    fleet = FleetStatus("c", "http://a:8000", [ServiceStatus("chat", False, cluster(READY, "running"))])
    doc = fleet.to_json()
    assert (doc["cluster"], doc["fleet"], doc["endpoint"]) == ("c", True, "http://a:8000/v1")
    assert doc["gateway_error"] is None
    assert [(s["name"], s["state"]) for s in doc["services"]] == [("chat", "loaded")]


def test_the_gateway_line_says_up_or_why_not_and_whether_the_loop_runs() -> None:
    none = "; no on-demand supervisor (`sparkctl supervise --detach`)"
    assert FleetStatus("c", "http://a:8000").gateway_line() == "fleet endpoint http://a:8000/v1: up" + none
    down = FleetStatus("c", "http://a:8000", gateway_error="gave no state (HTTP 403)")
    assert down.gateway_line() == "fleet endpoint http://a:8000/v1: gave no state (HTTP 403)" + none
    assert down.to_json()["gateway_error"] == "gave no state (HTTP 403)"
    looped = FleetStatus("c", "http://a:8000", supervisor={"pid": 42, "mode": "on-demand"})
    assert looped.gateway_line().endswith("; on-demand supervisor pid 42")
    assert looped.to_json()["supervisor"]["pid"] == 42


def test_the_fleet_is_unreachable_when_any_services_node_is() -> None:
    lost = cluster()
    lost.unreachable = {"a": "ssh: no route to host"}
    fleet = FleetStatus("c", "http://a:8000", [ServiceStatus("chat", False, cluster())])
    assert not fleet.unreachable
    fleet.services.append(ServiceStatus("coder", True, lost))
    assert fleet.unreachable


def two_services(chat_engine: str = "{container: {ipc: host}}") -> str:
    svc = "    image: {{ref: 'img:1'}}\n    model: {{target: {{id: org/{0}}}}}\n    modes: {{solo: {{nodes: [a]}}}}\n"
    return (
        "cluster: c\nnodes:\n  - {name: a, address: local}\nmodels:\n"
        f"  chat:\n    engine: {chat_engine}\n{svc.format('chat')}"
        f"  coder:\n    engine: {{api_key: {{env: CODER_KEY}}}}\n    on_demand: true\n{svc.format('coder')}"
    )


def test_the_operator_key_is_the_first_service_key_this_machine_reads(monkeypatch) -> None:
    monkeypatch.delenv("CODER_KEY", raising=False)
    prof = load_profile_text(two_services())
    assert operator_key(prof) is None  # chat has no key; coder's variable is not set
    monkeypatch.setenv("CODER_KEY", "sk-coder")
    assert operator_key(prof) == "sk-coder"
    monkeypatch.setenv("CHAT_KEY", "sk-chat")
    assert operator_key(load_profile_text(two_services("{api_key: {env: CHAT_KEY}}"))) == "sk-chat"


def test_the_gateways_view_is_asked_with_the_operator_key_or_says_why_not(monkeypatch) -> None:
    monkeypatch.setenv("CODER_KEY", "sk-coder")
    prof = load_profile_text(two_services())
    monkeypatch.setattr(fleet_gateway, "planned_gateway", lambda p: types.SimpleNamespace(url="http://a:9"))
    asked = []

    def state(url, key):
        asked.append((url, key))
        return {"coder": ServiceView("coder", True)}

    monkeypatch.setattr(fs, "fleet_state", state)
    assert gateway_view(prof) == ("http://a:9", {"coder": ServiceView("coder", True)}, None)
    assert asked == [("http://a:9", "sk-coder")]

    def refused(url, key):
        raise SparkctlError(f"the fleet gateway at {url} gave no state (HTTP 403)")

    monkeypatch.setattr(fs, "fleet_state", refused)
    assert gateway_view(prof) == (
        "http://a:9",
        None,
        "the fleet gateway at http://a:9 gave no state (HTTP 403)",
    )
