"""`sparkctl init --from-command`: the launch line a user runs today -> a profile that loads and
plans back into the same engine flags. The line's own parts are launch_line.py's; what the
engine's flags mean is the engine's reader (engines.command_reader); here the pieces become a
profile: nodes (this machine, --peer/--node, placeholders for the ranks the line implies), the
image, the model, one mode named by its layout, and the notes of everything not taken."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import yaml

from sparkctl.discover.launch_line import Container, LaunchLine, items, parse_line
from sparkctl.engines import DEFAULT_ENGINE, ENGINE_NAMES, command_reader, get_engine
from sparkctl.errors import ProfileError, UsageError
from sparkctl.findings import Finding, Severity
from sparkctl.profile.values import SECRET_NAME_RE

if TYPE_CHECKING:
    from sparkctl.discover.workflow import Target
    from sparkctl.profile.schema import Profile

CHECK = "FromCommand"
SOURCE = "<from-command>"  # the loader's name for the profile text (not a file)
IMAGE_PLACEHOLDER = "your-serving-image:tag"
MODEL_PLACEHOLDER = "your-org/your-model"
_HF_DIR = re.compile(
    r"(?P<cache>.*?)/(hub/)?models--(?P<org>[^/]+?)--(?P<name>[^/]+)(/snapshots/(?P<rev>[^/]+))?/?$"
)
_MODEL_ARG = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # ORG/NAME: a model as an entrypoint's first word
_VERSION_TAG = re.compile(r":v?(\d+\.\d+(\.\d+)?)")
# env a launch line sets that is a profile key (or sparkctl's own), not engine.env
_FABRIC_ENV = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
_SPARKCTL_ENV = ("HF_HOME", "HOME", "TRITON_CACHE_DIR", "CUDA_VISIBLE_DEVICES", "HF_HUB_OFFLINE")
CONTAINER_HF = ("/root/.cache/huggingface", "/root/.cache/huggingface/")


@dataclass(frozen=True)
class FromCommandRequest:
    line: str
    targets: list[Target]  # --peer/--node, or [("local", None, None)]
    image: str | None = None
    cluster: str | None = None
    gpu: dict | None = None  # a GpuSpec for every node (--gpu, or this machine's nvidia-smi)
    local_gpus: int | None = None  # GPUs this machine has (nvidia-smi)


@dataclass
class FromCommand:
    text: str  # the profile's YAML, comments first
    profile: Profile
    mode: str
    findings: list[Finding] = field(default_factory=list)  # what was not taken, and why
    placeholders: list[str] = field(default_factory=list)  # keys to fill in before `fit`/`up`

    @property
    def unknown_nodes(self) -> bool:
        """A node the line implies but nobody named: `fit` would judge a machine that is not there."""
        return any(p.startswith("nodes[") and ".address" in p for p in self.placeholders)


def _marked(engine: str, image: str) -> bool:
    """The image names the engine (one of its image markers): its entrypoint is the engine's."""
    images = get_engine(engine).images
    return images is not None and any(m in image for m in images.markers)


def read_engine(line: LaunchLine) -> tuple[dict, list[Finding]]:
    """The engine whose launcher starts the line, else the one the image is (its entrypoint
    takes the flags); its reader's fragment."""
    readers = {n: r for n in ENGINE_NAMES if (r := command_reader(n)) is not None}
    for reader in readers.values():
        n = reader.launcher_words(line.words)
        if n is not None:
            return reader.read(items(line.words[n:]))
    image = line.container.image.lower() if line.container else ""
    by_image = [n for n in readers if _marked(n, image)]
    first_word = line.words[0] if line.words else "-"
    if by_image and (first_word.startswith("-") or _MODEL_ARG.fullmatch(first_word)):  # the entrypoint's args
        return readers[by_image[0]].read(items(line.words))
    known = " or ".join(f"`{' '.join(get_engine(n).default_command)} ...`" for n in readers)
    first = " ".join(line.words[:3]) or (line.container.image if line.container else "")
    raise UsageError(
        f"--from-command: {first!r} is not an engine's launch command", fix=f"paste a {known} line"
    )


def _model(ref: dict | None, notes: list[Finding], holes: list[str], what: str) -> tuple[dict, str | None]:
    """{id, revision} as the profile takes it, and the HF cache a `.../models--ORG--NAME/...`
    path names; a local directory or nothing is a placeholder."""
    from sparkctl.profile.security import model_id

    if ref is None:
        holes.append(f"model.{what}.id (the line names no model)")
        return {"id": MODEL_PLACEHOLDER}, None
    text, rev = str(ref["id"]), ref.get("revision")
    hf = _HF_DIR.match(text)
    if hf:
        text, rev, cache = f"{hf['org']}/{hf['name']}", rev or hf["rev"], hf["cache"] or None
    else:
        cache = None
    try:
        model_id(text)
    except ValueError:
        notes.append(
            Finding(CHECK, Severity.ERROR, f"model {text!r} is a path, not a Hugging Face id",
                    fix=f"set model.{what}.id to the repo id (sparkctl serves it from the HF cache)")
        )  # fmt: skip
        holes.append(f"model.{what}.id")
        return {"id": MODEL_PLACEHOLDER, "revision": "main"}, None
    return {"id": text, "revision": rev or "main"}, cache


def _env(line: LaunchLine, engine: dict, fabric: dict, notes: list[Finding]) -> None:
    env: dict[str, str] = {}
    for key, value in line.env.items():
        if SECRET_NAME_RE.search(key):
            engine.setdefault("secrets", {})[key] = {"env": key}
            notes.append(Finding(CHECK, Severity.WARN, f"{key}: its value is not written into the profile",
                                 fix=f"export {key} in the shell that runs sparkctl"))  # fmt: skip
        elif key in _FABRIC_ENV:
            fabric["netdevs"] = value.split(",")
        elif key == "NCCL_IB_HCA":
            fabric["hcas"] = [h.split(":")[0] for h in value.lstrip("=^").split(",")]
        elif key == "NCCL_IB_DISABLE":
            fabric["transport"] = "tcp" if value == "1" else "roce"
        elif key == "HF_HUB_OFFLINE":
            engine["offline"] = value != "0"
        elif key in _SPARKCTL_ENV:
            notes.append(Finding(CHECK, Severity.WARN, f"{key}={value}: sparkctl sets {key} itself: dropped"))
        else:
            env[key] = value
    if env:
        engine["env"] = env


def _nodes(req: FromCommandRequest, layout: dict, fabric: dict, holes: list[str]) -> list[dict]:
    """One node per rank the line implies (--nnodes), this machine at the line's --node-rank."""
    import socket

    from sparkctl.discover.proposal import node_names

    nnodes, rank = int(layout.get("nnodes", 1)), int(layout.get("node_rank", 0))
    given = list(req.targets)
    if len(given) == 1 and given[0][0] == "local" and 0 < rank < nnodes:
        given = [None] * rank + given  # type: ignore[list-item]
    slots = given + [None] * max(0, nnodes - len(given))
    hosts = [
        socket.gethostname() if t and t[0] == "local" else (t[0] if t else f"node{i + 1}")
        for i, t in enumerate(slots)
    ]
    names = node_names(hosts)
    per_node = max(1, int(layout.get("tp", 1)) * int(layout.get("pp", 1)) // max(1, nnodes))
    out: list[dict] = []
    for i, (target, name) in enumerate(zip(slots, names, strict=True)):
        node: dict = {"name": name, "address": target[0] if target else f"{name}.invalid"}
        if target is None:
            holes.append(f"nodes[{i}].address (rank {i} of the line's {nnodes} nodes)")
        elif target[1]:
            node["user"] = target[1]
        if target and target[2]:
            node["port"] = target[2]
        local = bool(target and target[0] == "local")
        node["gpus"] = max(per_node, req.local_gpus or 0) if local else per_node
        if req.gpu:
            node["gpu"] = dict(req.gpu)
        if nnodes > 1:
            node["fabric"] = _node_fabric(i, layout, fabric, holes)
        out.append(node)
    return out


def _node_fabric(i: int, layout: dict, fabric: dict, holes: list[str]) -> dict:
    """Rank 0's fabric address is the line's rendezvous address; the others' follow it (a guess)."""
    import ipaddress

    netdevs = fabric.get("netdevs")
    if not netdevs:
        holes.append(f"nodes[{i}].fabric.netdevs (the line names no NCCL_SOCKET_IFNAME)")
    try:
        base = ipaddress.IPv4Address(str(layout.get("dist_init_addr", "")))
    except ValueError:
        base = ipaddress.IPv4Address("192.168.100.10")
        holes.append(f"nodes[{i}].fabric.ip (the line gives no IPv4 rendezvous address)")
    else:
        if i:
            holes.append(f"nodes[{i}].fabric.ip (assumed rank 0's + {i})")
    out: dict = {"netdevs": netdevs or ["set-fabric-netdev"], "ip": str(base + i)}
    if fabric.get("hcas"):
        out["hcas"] = fabric["hcas"]
    return out


def mode_name(layout: dict) -> str:
    tp, pp = int(layout.get("tp", 1)), int(layout.get("pp", 1))
    return "solo" if tp * pp == 1 else f"tp{tp}" + (f"-pp{pp}" if pp > 1 else "")


def _image(
    req: FromCommandRequest, container: Container | None, kind: str, engine: dict, holes: list[str]
) -> str:
    ref = (container.image if container else None) or req.image
    if not ref:
        holes.append("image.ref (the line has no `docker run ... IMAGE`; or pass --image)")
        return IMAGE_PLACEHOLDER
    images = get_engine(kind).images
    version_key = images.version_key if images else None
    tag = _VERSION_TAG.search(ref.rsplit("/", 1)[-1])
    if version_key and tag:
        engine.setdefault("options", {})[version_key] = tag.group(1)  # that release's rules (fit, preflight)
    return ref


def build(
    req: FromCommandRequest, line: LaunchLine, frag: dict, notes: list[Finding]
) -> tuple[dict, list[str]]:
    """The profile as a mapping, and the keys left as placeholders."""
    from sparkctl.discover.proposal import default_cluster, sanitize

    holes: list[str] = []
    kind, layout = frag["kind"], frag["layout"]
    engine: dict = {"kind": kind} if kind != DEFAULT_ENGINE else {}
    fabric: dict = {}
    image = _image(req, line.container, kind, engine, holes)
    target, cache = _model(frag["model"], notes, holes, "target")
    model: dict = {"target": target}
    if frag["draft"]:
        model["draft"], _ = _model(frag["draft"], notes, holes, "draft")
    for host, inside in line.container.volumes if line.container else []:
        if inside in CONTAINER_HF or inside == line.env.get("HF_HOME"):
            cache = host
    if cache:
        model["hf_cache"] = cache
    engine.update(frag["engine"])
    if frag["api_keys"]:
        engine["api_key"] = {"env": "SPARKCTL_API_KEY"}
    if "admin_api_key" in frag["api_keys"]:
        engine["admin_api_key"] = {"env": "SPARKCTL_ADMIN_API_KEY"}
    _env(line, engine, fabric, notes)
    if line.container and line.container.shm_size:
        engine["container"] = {"shm_size": line.container.shm_size}
    engine["recipe_defaults"] = False  # the line as it is: no flag of sparkctl's recipe added
    engine["args"] = frag["args"]
    nodes = _nodes(req, layout, fabric, holes)
    need = max(n["gpus"] for n in nodes)
    if req.local_gpus is not None and req.local_gpus < need:
        notes.append(Finding(CHECK, Severity.WARN, f"this machine has {req.local_gpus} GPU(s); the line's "
                             f"layout needs {need} per node", fix="run it where the GPUs are, or lower --tp"))  # fmt: skip
    name = mode_name(layout)
    spans = [
        n["name"] for n in nodes[: int(layout.get("nnodes", 1))]
    ]  # the line's ranks; other --peer nodes idle
    mode: dict = {"nodes": spans, "tp": int(layout.get("tp", 1)), "default": True}
    if int(layout.get("pp", 1)) > 1:
        mode["pp"] = int(layout["pp"])
    cluster = req.cluster or default_cluster([sanitize(str(target["id"]).rsplit("/", 1)[-1])])
    out: dict = {"cluster": cluster}
    if len(spans) > 1:
        out["fabric"] = {k: fabric[k] for k in ("transport",) if k in fabric}
        if "dist_init_port" in layout:
            out["fabric"]["dist_init_port"] = int(layout["dist_init_port"])
    out |= {"nodes": nodes, "image": {"ref": image}, "model": model, "engine": engine, "modes": {name: mode}}
    return out, holes


class _Dumper(yaml.SafeDumper):
    """Every value written out where it belongs: no `&id001` anchors for a list used twice."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def render(data: dict, notes: list[Finding], holes: list[str]) -> str:
    head = ["# Written by `sparkctl init --from-command` from your launch line; edit freely.",
            "# Check it: `sparkctl profile check`, then `sparkctl fit`. Keys: docs/profile.md."]  # fmt: skip
    head += [f"# placeholder: {h}" for h in holes]
    for f in notes:
        head.append(f"# {f.severity.value}: {f.message}" + (f" (fix: {f.fix})" if f.fix else ""))
    body = yaml.dump(
        data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100, allow_unicode=True
    )
    return "\n".join(head) + "\n" + body


def _drop_env(data: dict, exc: ProfileError, notes: list[Finding]) -> bool:
    """An engine.env key sparkctl renders itself (planning's rule): dropped, with a note."""
    m = re.match(r"engine\.env\.([A-Za-z_][A-Za-z0-9_]*):", exc.message)
    env = data["engine"].get("env", {})
    if not m or m.group(1) not in env:
        return False
    del env[m.group(1)]
    notes.append(Finding(CHECK, Severity.WARN, f"{m.group(1)}: sparkctl sets it itself: dropped"))
    return True


def from_command(req: FromCommandRequest) -> FromCommand:
    """The line -> a profile text that loads and plans (placeholders where the line says nothing)."""
    from sparkctl.planning.build import build_plan
    from sparkctl.profile import load_profile_text

    line = parse_line(req.line)
    frag, notes = read_engine(line)
    if line.container and line.container.ignored:
        opts = ", ".join(line.container.ignored)
        notes.append(
            Finding(CHECK, Severity.WARN, f"docker {opts}: not taken, sparkctl sets up the container")
        )
    data, holes = build(req, line, frag, notes)
    name = next(iter(data["modes"]))
    for _ in range(len(data["engine"].get("env", {})) + 1):
        text = render(data, notes, holes)
        try:
            profile = load_profile_text(text, SOURCE)
            build_plan(profile, name)
        except ProfileError as exc:
            if _drop_env(data, exc, notes):
                continue
            why = exc.message.removeprefix(SOURCE + ":").lstrip("0123456789: ")
            raise UsageError(
                f"--from-command: the line's profile is refused: {why}",
                fix=exc.fix or "correct that flag in the line (docs/profile.md says what each key takes)",
            ) from None
        return FromCommand(text, profile, name, notes, holes)
    raise AssertionError("unreachable: every engine.env key was dropped")
