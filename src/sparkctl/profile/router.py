"""The profile's `router:` section: the router (sglang-router) in front of a mode's replicas."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sparkctl.profile.base import Port, Strict
from sparkctl.profile.security import ImageRef


class Router(Strict):
    """The router (sglang-router) in front of a mode's replicas (modes with replicas > 1)."""

    node: str | None = Field(
        None, description="Node that runs the router container (default: the first replica's rank 0)."
    )
    policy: Literal["cache_aware", "round_robin", "random", "power_of_two"] = Field(
        "round_robin",
        description="How the router picks a replica (sglang-router --policy). cache_aware reuses "
        "prefix caches but fails a few requests when a replica dies (docs/topology.md).",
    )
    metrics_port: Port = Field(
        29000, description="The router's Prometheus exporter, bound to 127.0.0.1 on its node."
    )
    image: ImageRef | None = Field(
        None, description="Image with sglang-router (default: the serving image, which ships it)."
    )
    command: list[str] = Field(
        default_factory=lambda: ["python3", "-m", "sglang_router.launch_router"],
        min_length=1,
        description="The router's launcher in that image.",
    )
    health_check_interval: int = Field(
        2, ge=1, le=300, description="Seconds between the router's health checks of each replica."
    )
    health_failure_threshold: int = Field(
        2, ge=1, le=100, description="Failed checks in a row before the router stops sending to a replica."
    )
    drain_timeout: float = Field(
        120.0, gt=0, description="Seconds a rolling switch waits for a replica's in-flight requests."
    )
