"""Which endpoint a command talks to: --url/--model as given, or the profile's plan for MODE
(default: the mode running now, else the profile's default mode), with the bearer key to send.
Shared by verify and bench (neither imports the other)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkctl.errors import UsageError

if TYPE_CHECKING:
    from sparkctl.profile.schema import Profile


@dataclass(frozen=True)
class ApiTarget:
    url: str
    model: str
    config_hash: str | None
    mode: str | None
    api_key: str | None  # never printed


def resolve_endpoint(
    load_profile: Callable[[], Profile],
    mode: str | None,
    url: str | None,
    model: str | None,
    api_key: str | None = None,
    api_key_env: str | None = None,
) -> ApiTarget:
    """The profile is loaded only when --url is not given. The key: --api-key, --api-key-env,
    else the profile's."""
    from sparkctl.clients.api import resolve_api_key
    from sparkctl.secrets import local_ref, resolve_known

    if model and not url:
        prof = load_profile()
        if prof.models:
            return fleet_target(prof, model, mode, api_key, api_key_env)
    if url or model:
        if not (url and model):
            raise UsageError("--url and --model go together", fix="pass both, or neither and use -p PROFILE")
        if mode:
            raise UsageError("MODE and --url are exclusive", fix="drop MODE, or drop --url/--model")
        return ApiTarget(url, model, None, None, resolve_api_key(api_key, api_key_env, None))
    from sparkctl.planning.build import build_plan

    prof = load_profile()
    if mode is None:
        from sparkctl.lifecycle.modes import resolve_mode

        mode = resolve_mode(prof, fallback=("running", "default"))  # what runs now, else the default
    plan = build_plan(prof, mode)
    key = resolve_api_key(api_key, api_key_env, resolve_known(local_ref("api-key", prof.engine.api_key)))
    return ApiTarget(plan.endpoint.url, plan.endpoint.served_model_name, plan.settled_hash, plan.mode, key)


def fleet_target(
    profile: Profile, model: str, mode: str | None, api_key: str | None, api_key_env: str | None
) -> ApiTarget:
    """`--model NAME` of a fleet: its one endpoint, asked for NAME (a service's name is sent as
    its served name), with that service's key."""
    from sparkctl.clients.api import resolve_api_key
    from sparkctl.lifecycle.fleet_gateway import planned_gateway
    from sparkctl.planning.fleet_view import service_view
    from sparkctl.secrets import local_ref, resolve_known

    if mode:
        raise UsageError(
            "MODE and --model are exclusive on a fleet", fix="drop MODE: --model picks the service"
        )
    gw = planned_gateway(profile)
    route = next((r for r in gw.spec.routes if model in r.names or model == r.service), None)
    if route is None:
        names = ", ".join(n for r in gw.spec.routes for n in r.names)
        raise UsageError(f"the fleet serves no model '{model}'", fix=f"--model one of: {names}")
    view = service_view(profile, route.service)
    key = resolve_api_key(api_key, api_key_env, resolve_known(local_ref("api-key", view.engine.api_key)))
    return ApiTarget(gw.url, route.names[0], None, None, key)
