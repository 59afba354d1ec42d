"""`sparkctl diagnose`: gather what a maintainer asks for first into one masked bundle.

Every node is asked once, in one batch of bounded probes; a node that cannot be reached is a
fact of the manifest, never a hang or a failed command. The secret values are learnt before any
member is added (the env values here, the file values read on the nodes that answered), and
every member is masked as it is added (bundle.py)."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkctl import __version__
from sparkctl.facts.probe import run_batch
from sparkctl.fanout import fan_out
from sparkctl.lifecycle.diagnose.bundle import Bundle
from sparkctl.lifecycle.diagnose.mask import Masker
from sparkctl.lifecycle.diagnose.probes import NODE_PROBES
from sparkctl.secrets import local_ref, resolve_known, secret_values

if TYPE_CHECKING:
    from sparkctl.connectors import NodePool
    from sparkctl.planning.model import Plan, RankSpec
    from sparkctl.profile import Profile

Progress = Callable[[str], None]
LOG_TIMEOUT = 30.0


@dataclass(frozen=True)
class Diagnosis:
    path: Path
    manifest: dict


def diagnose(
    profile: Profile,
    pool: NodePool,
    mode: str | None,
    out: Path,
    *,
    tail: int = 200,
    progress: Progress = lambda _: None,
) -> Diagnosis:
    start = time.monotonic()
    plan, plan_error = _plan(profile, mode)
    nodes = [n.name for n in profile.nodes]
    progress(f"asking {len(nodes)} node(s) for their facts ({', '.join(nodes)})")
    got = fan_out(nodes, lambda n: run_batch(pool.get(n), NODE_PROBES))
    unreachable = {n: getattr(e, "message", None) or str(e) for n, e in got.errors.items()}
    for node, why in unreachable.items():
        progress(f"{node}: unreachable ({why})")
    bundle = Bundle(
        root=f"sparkctl-diagnose-{profile.cluster}",
        masker=Masker(_secret_values(profile, pool, plan, [n for n in nodes if n not in unreachable])),
    )
    for node in nodes:
        _add_node(bundle, node, got.ok.get(node), unreachable.get(node))
    bundle.add_json("profile.json", profile.model_dump(mode="json"), "the profile (secrets are references)")
    if plan is not None:
        bundle.add_json("plan.json", plan.to_json(), f"the plan of mode {plan.mode}")
        _sections(bundle, profile, pool, plan, unreachable, tail, progress)
    else:
        bundle.failed("plan.json", "the plan", plan_error or "no mode")
    _add_events(bundle, profile)
    progress(f"writing {out}")
    written = bundle.write(
        out,
        cluster=profile.cluster,
        mode=plan.mode if plan else mode,
        sparkctl=__version__,
        controller={"python": platform.python_version(), "platform": platform.platform()},
        created=time.time(),
        elapsed_s=round(time.monotonic() - start, 2),
    )
    return Diagnosis(written, bundle.manifest())


def _plan(profile: Profile, mode: str | None) -> tuple[Plan | None, str | None]:
    from sparkctl.errors import SparkctlError
    from sparkctl.planning.build import build_plan

    try:
        return build_plan(profile, mode), None
    except SparkctlError as exc:
        return None, exc.message


def _secret_values(profile: Profile, pool: NodePool, plan: Plan | None, reachable: list[str]) -> list[str]:
    """Every value the profile marks secret that this run can learn: env values (any mode), the
    controller's readable files, and the files on every node that answered."""
    eng = profile.engine
    sources = [
        *eng.secrets.items(),
        *((n, s) for n, s in (("api_key", eng.api_key), ("admin_api_key", eng.admin_api_key)) if s),
        *((f"api_keys.{n}", s) for n, s in eng.api_keys.items()),
    ]
    values = [v for v in (resolve_known(local_ref(name, s)) for name, s in sources) if v]
    specs: list[RankSpec] = [*(plan.ranks if plan else []), *([plan.router] if plan and plan.router else [])]
    for spec in specs:
        if spec.node in reachable:
            values += secret_values(spec.secret_refs(), pool.get(spec.node))
    if plan and plan.endpoint.api_key is not None:
        values += [v for v in [resolve_known(plan.endpoint.api_key)] if v]
    return values


def _add_node(bundle: Bundle, node: str, facts: dict[str, Any] | None, why: str | None) -> None:
    if facts is None:
        bundle.nodes[node] = {"reachable": False, "error": bundle.masker.text(why or "unreachable")}
        return
    failed = {}
    for name, value in facts.items():
        path = f"nodes/{node}/{name}"
        if isinstance(value, BaseException):
            failed[name] = str(value)
            bundle.failed(path, NODE_PROBES[name].argv[0], str(value))
            continue
        text = value["stdout"] + (
            f"\n--- stderr (exit {value['rc']}) ---\n{value['stderr']}" if value["rc"] else ""
        )
        bundle.add(path, text, " ".join(NODE_PROBES[name].argv[:3]), rc=value["rc"])
        if value["rc"]:
            failed[name] = f"exit {value['rc']}"
    bundle.nodes[node] = {"reachable": True, "probes": len(facts), "failed": failed}


def _sections(
    bundle: Bundle,
    profile: Profile,
    pool: NodePool,
    plan: Plan,
    unreachable: dict[str, str],
    tail: int,
    progress: Progress,
) -> None:
    from sparkctl.lifecycle.status import status
    from sparkctl.preflight import run_preflight

    progress("running preflight")
    _guarded(
        bundle, "preflight.json", "preflight --json", lambda: run_preflight(profile, plan, pool).to_json()
    )
    progress("reading status")
    _guarded(bundle, "status.json", "status --json", lambda: status(profile, pool, plan.mode).to_json())
    specs = [*plan.ranks, *([plan.router] if plan.router else [])]
    progress(f"reading the last {tail} lines of {len(specs)} log(s)")
    _add_logs(bundle, profile, pool, specs, unreachable, tail)


def _guarded(bundle: Bundle, path: str, what: str, fn: Callable[[], object]) -> None:
    try:
        bundle.add_json(path, fn(), what)
    except Exception as exc:  # noqa: BLE001 - a section that fails is recorded, the bundle goes on
        bundle.failed(path, what, f"{type(exc).__name__}: {getattr(exc, 'message', None) or exc}")


def _add_logs(
    bundle: Bundle,
    profile: Profile,
    pool: NodePool,
    specs: list[RankSpec],
    unreachable: dict[str, str],
    tail: int,
) -> None:
    from sparkctl.lifecycle.logs import rank_log_path, read_argv

    def read(spec: RankSpec) -> str:
        res = pool.get(spec.node).run(
            read_argv(rank_log_path(profile, spec), tail, None), timeout=LOG_TIMEOUT
        )
        if not res.ok:
            raise OSError((res.stderr or res.stdout).strip().splitlines()[-1:] or f"exit {res.rc}")
        return res.stdout

    def name(spec: RankSpec) -> str:
        return "logs/router.log" if spec.role == "router" else f"logs/rank{spec.rank}.log"

    keys = [i for i, s in enumerate(specs) if s.node not in unreachable]  # a RankSpec is not hashable
    got = fan_out(keys, lambda i: read(specs[i]), where=lambda i: (specs[i].node, specs[i].rank))
    for i, spec in enumerate(specs):
        what = f"{spec.container_name} on {spec.node}, last {tail} lines"
        if spec.node in unreachable:
            bundle.failed(name(spec), what, f"{spec.node} unreachable")
        elif i in got.errors:
            bundle.failed(name(spec), what, str(got.errors[i]))
        else:
            bundle.add(name(spec), got.ok[i], what, node=spec.node)


def _add_events(bundle: Bundle, profile: Profile) -> None:
    import json

    from sparkctl.lifecycle.state import cluster_file, events

    lines = "".join(json.dumps(e, default=str) + "\n" for e in events(profile.cluster))
    bundle.add(
        "events.jsonl", lines, f"the supervisor's events ({cluster_file(profile.cluster, '.events.jsonl')})"
    )
    env = {k: v for k, v in os.environ.items() if k.startswith("SPARKCTL_")}
    bundle.add_json("controller-env.json", env, "the controller's SPARKCTL_* variables")
