"""`sparkctl init`'s pure half: names, modes, defaults, and a rendered profile that loads and plans."""

from __future__ import annotations

import pytest

from sparkctl.discover.fabric import FabricEnd, FabricOption
from sparkctl.discover.facts import HfCache, NodeDiscovery, engine_images_from_list, parse_caches
from sparkctl.discover.proposal import (
    Answers,
    build_draft,
    node_names,
    propose_modes,
)
from sparkctl.discover.render import render_profile
from sparkctl.facts.docker import DockerFacts
from sparkctl.facts.gpu import Gpu, GpuReport
from sparkctl.facts.hfcache import RepoListing
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_text

C1, C2 = "a" * 40, "b" * 40
GB10 = GpuReport(gpus=(Gpu(0, "NVIDIA GB10", compute_cap="12.1"),), source="nvidia-smi", unified_memory=True)


def listing(main: str) -> RepoListing:
    return RepoListing(exists=True, refs={"main": main}, snapshots={main: 5})


def node(host: str, name: str, *, caches=(), images=(), gpus=GB10) -> NodeDiscovery:
    return NodeDiscovery(
        host=host,
        name=name,
        hostname=f"{name}.lan",
        description=host,
        ssh_ip=None,
        netdevs={},
        gpus=gpus,
        mem_total_kib=125_000_000,
        docker=DockerFacts("27.0", ("nvidia", "runc"), "runc", "/var/lib/docker"),
        images=list(images),
        caches=list(caches),
    )


def fabric(roce: bool = True, names: tuple[str, str] = ("spark1", "spark2")) -> FabricOption:
    from ipaddress import IPv4Network

    hcas = ("rocep1s0f1", "roceP2p1s0f1") if roce else ()
    ends = tuple(
        FabricEnd(n, "enp1s0f1np1", f"192.168.100.{i}", 24, 9000, 200000, hcas)
        for i, n in zip((10, 11), names, strict=True)
    )
    return FabricOption(IPv4Network("192.168.100.0/24"), ends, management=False)


def test_node_names_from_hostnames_are_valid_and_unique() -> None:
    assert node_names(["spark-1a2b.local", "Spark-1A2B", "", "_weird_"]) == [
        "spark-1a2b",
        "spark-1a2b-2",
        "node3",
        "weird",
    ]


def test_modes_for_the_three_shapes() -> None:
    def shape(names, gpus, multi):
        return [(m.name, m.nodes, m.tp, m.replicas, m.default) for m in propose_modes(names, gpus, multi)]

    assert shape(["spark1", "spark2"], [1, 1], True) == [
        ("solo", ("spark1",), 1, 1, True),
        ("solo-spark2", ("spark2",), 1, 1, False),
        ("tp2", ("spark1", "spark2"), 2, 1, False),
    ]
    assert shape(["box"], [2], False) == [
        ("solo", ("box",), 1, 1, True),
        ("tp2", ("box",), 2, 1, False),
        ("dp2", ("box",), 1, 2, False),
    ]
    # Two nodes with 2 GPUs each: TP 4 across, and TP 2 / a replica per GPU on each node under
    # its own name.
    assert [m[0] for m in shape(["a", "b"], [2, 2], True)] == [
        "solo",
        "solo-b",
        "tp4",
        "tp2-a",
        "dp2-a",
        "tp2-b",
        "dp2-b",
    ]


def test_parse_caches_and_sglang_images() -> None:
    text = (
        "cache\tgiven\t/data/hf\nrepo\t/data/hf\tmodels--Qwen--Qwen3.6-27B-NVFP4\n"
        "repo\t/data/hf\tmodels--z-lab--Qwen3.6-27B-DFlash\n"
        "cache\tdefault\t/home/spark/.cache/huggingface\n"
        "cache\tHF_HOME\t/data/hf\n"  # the same dir again: first mention wins
    )
    assert parse_caches(text) == [
        ("given", "/data/hf", ["Qwen/Qwen3.6-27B-NVFP4", "z-lab/Qwen3.6-27B-DFlash"]),
        ("default", "/home/spark/.cache/huggingface", []),
    ]
    imgs = engine_images_from_list(
        [
            {"RepoTags": ["lmsysorg/sglang:v0.5.2-cu129"], "Id": "sha256:1", "Size": 10},
            {
                "RepoTags": ["sparkctl-test/engine:latest"],
                "Id": "sha256:2",
                "Labels": {"org.sparkctl.sglang.version": "0.5.23"},
            },
            {"RepoTags": ["ubuntu:24.04"], "Id": "sha256:3"},
            {"RepoTags": None, "Id": "sha256:4", "Labels": {"sglang": "1"}},
        ]
    )
    assert [(i.ref, i.version) for i in imgs] == [
        ("lmsysorg/sglang:v0.5.2-cu129", None),
        ("sparkctl-test/engine:latest", "0.5.23"),
    ]
    # `init --image REF` names an image without 'sglang' in it: found on the node all the same.
    items = [
        {"RepoTags": ["ubuntu:24.04"], "Id": "sha256:3"},
        {"RepoTags": ["my/serve:latest"], "Id": "sha256:5"},
    ]
    assert [i.ref for i in engine_images_from_list(items)] == []
    assert [(i.ref, i.id) for i in engine_images_from_list(items, "my/serve")] == [("my/serve", "sha256:5")]
    assert [i.ref for i in engine_images_from_list(items, "ubuntu:24.04")] == ["ubuntu:24.04"]
    labelled = [{"RepoTags": ["org/engine:latest"], "Id": "sha256:6", "Labels": {"sglang.version": "0.5.23"}}]
    assert [i.ref for i in engine_images_from_list(labelled, "org/engine")] == [
        "org/engine",
        "org/engine:latest",
    ]


def test_rendered_dual_spark_profile_loads_and_plans_with_the_discovered_fabric() -> None:
    repos = {"Qwen/Qwen3.6-27B-NVFP4": listing(C1), "z-lab/Qwen3.6-27B-DFlash": listing(C2)}
    a = node("local", "spark1", caches=[HfCache("/root/.cache/huggingface", "default", repos)])
    # spark2 keeps its models under HF_HOME=/data/hf: the profile says so for that node only.
    b = node("spark2.local", "spark2", caches=[HfCache("/data/hf", "HF_HOME", repos)])
    answers = Answers(
        cluster="sparkduo",
        model="Qwen/Qwen3.6-27B-NVFP4",
        image="sglang-dflash:spark",
        draft="z-lab/Qwen3.6-27B-DFlash",
        draft_revision="5b0d4b5",
    )
    draft = build_draft(
        [a, b],
        ["spark1", "spark2"],
        fabric(),
        answers,
        addresses=[("local", None, None), ("spark2.local", "spark", 2222)],
    )
    text = render_profile(draft)
    prof = load_profile_text(text, "init")
    assert prof.cluster == "sparkduo" and prof.fabric.transport == "roce" and prof.fabric.mtu == 9000
    n1, n2 = prof.nodes
    assert n1.address == "local" and (n2.address, n2.user, n2.port) == ("spark2.local", "spark", 2222)
    assert n2.hf_cache == "/data/hf" and n1.hf_cache is None and prof.model.hf_cache == "~/.cache/huggingface"
    assert n1.gpu is not None and n1.gpu.compute_capability == "12.1" and n1.gpu.unified_memory
    assert prof.model.target.revision == C1  # refs/main, the same commit on both nodes: pinned
    assert prof.model.draft is not None and prof.model.draft.revision == "5b0d4b5"
    assert not prof.engine.container.privileged and prof.engine.container.gpus
    assert prof.engine.container.preset == "rdma" and prof.engine.host == "127.0.0.1"
    assert prof.engine.api_key is not None and prof.engine.api_key.env == "SPARKCTL_API_KEY"
    assert "# refs/main on every node when init ran" in text
    plan = build_plan(prof, "tp2")
    env1 = plan.ranks[1].env
    assert env1["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1" and env1["SGLANG_HOST_IP"] == "192.168.100.11"
    assert env1["NCCL_SOCKET_IFNAME"] == "enp1s0f1np1" and plan.dist_init_addr == "192.168.100.10:50051"
    # spark2 is addressed by name: its --host is the IP that name has on spark2, resolved by `up`
    assert plan.unresolved == ["spark2: --host is the IP spark2.local has on spark2 (resolved there by `up`)"]
    assert prof.default_mode() == "solo"


def test_gpu_less_tcp_draft_warns_and_still_loads() -> None:
    a, b = node("h1", "n1", gpus=None), node("h2", "n2", gpus=None)
    draft = build_draft(
        [a, b],
        ["n1", "n2"],
        fabric(roce=False, names=("n1", "n2")),
        Answers("lab", "org/m", "img:1"),
        addresses=[("h1", None, None), ("h2", None, None)],
    )
    prof = load_profile_text(render_profile(draft))
    assert prof.fabric.transport == "tcp" and not prof.engine.container.gpus
    assert [n.gpus for n in prof.nodes] == [1, 1] and prof.model.target.revision == "main"
    text = " ".join(draft.warnings)
    for expected in (
        "no NVIDIA GPU found on any node",
        "transport tcp",
        "org/m is in no node's HF cache: download it on n1 (`hf download org/m --revision main`)",
    ):
        assert expected in text


@pytest.mark.parametrize("bad_main", [None, C2])
def test_revision_is_not_pinned_when_nodes_disagree(bad_main: str | None) -> None:
    a = node("h1", "n1", caches=[HfCache("/c", "given", {"org/m": listing(C1)})])
    b_repos = {"org/m": listing(bad_main)} if bad_main else {}
    b = node("h2", "n2", caches=[HfCache("/c", "given", b_repos)])
    draft = build_draft(
        [a, b],
        ["n1", "n2"],
        fabric(names=("n1", "n2")),
        Answers("c", "org/m", "i", hf_cache="/c"),
        addresses=[("h1", None, None), ("h2", None, None)],
    )
    assert draft.model_revision.value == "main"
    assert "pin a commit" in draft.model_revision.note


def test_images_are_detected_per_engine_by_the_engines_markers() -> None:
    items = [
        {
            "RepoTags": ["sparkctl-test/vllm-cpu:0.32.0"],
            "Labels": {"org.sparkctl.vllm.version": "0.32.0"},
            "Id": "a",
        },
        {"RepoTags": ["lmsysorg/sglang:v0.5.23"], "Labels": {}, "Id": "b"},
        {"RepoTags": ["ubuntu:24.04"], "Id": "c"},
        {"RepoTags": ["ghcr.io/ggml-org/llama.cpp:server-cuda"], "Id": "d"},
    ]
    found = {i.ref: (i.engine, i.version) for i in engine_images_from_list(items)}
    assert found == {
        "sparkctl-test/vllm-cpu:0.32.0": ("vllm", "0.32.0"),
        "lmsysorg/sglang:v0.5.23": ("sglang", None),
        "ghcr.io/ggml-org/llama.cpp:server-cuda": ("llamacpp", None),
    }


def test_init_writes_the_engines_own_version_key_from_the_image_label() -> None:
    """The chosen image's version label lands under the engine's `version_key` (SGLang:
    engine.options.version, its rules are picked by it); an engine without one gets no key."""
    from sparkctl.discover.facts import EngineImage

    for kind, ref, key in (
        ("sglang", "lmsysorg/sglang:v0.5.23", "version"),
        ("vllm", "v/vllm:1", None),
    ):
        img = EngineImage(ref, "sha256:x", 1, "0.5.23", kind)
        a = node("local", "spark1", images=[img])
        answers = Answers(cluster="one", model="org/m", image=ref)
        draft = build_draft([a], ["spark1"], None, answers, addresses=[("local", None, None)])
        prof = load_profile_text(render_profile(draft), "init")
        assert prof.engine.kind == kind
        assert prof.engine.options.get("version") == ("0.5.23" if key else None)
