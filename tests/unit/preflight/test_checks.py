"""The pure check functions and check-name handling: facts in, findings with fixes out."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.engines.sglang.flags import mem_fraction
from sparkctl.errors import UsageError
from sparkctl.facts.disk import DiskUsage
from sparkctl.facts.docker import ContainerFacts, DockerFacts, ImageFacts
from sparkctl.facts.gpu import parse_meminfo
from sparkctl.facts.hfcache import RepoListing
from sparkctl.facts.net import Netdev
from sparkctl.findings import Finding, Severity
from sparkctl.planning.build import build_plan
from sparkctl.preflight.checks.disk import check_disk
from sparkctl.preflight.checks.docker import check_docker
from sparkctl.preflight.checks.fabric import check_fabric_netdevs
from sparkctl.preflight.checks.image import check_images
from sparkctl.preflight.checks.memory import check_unified_memory
from sparkctl.preflight.checks.ports import check_ports, check_stray
from sparkctl.preflight.checks.weights import check_weights, check_weights_content
from sparkctl.preflight.registry import CHECKS, FAST_CHECKS, validate_names
from sparkctl.preflight.runner import _apply_ignore
from sparkctl.profile import load_profile_file

ROOT = Path(__file__).parents[3]
GB10_MEMINFO = ROOT / "tests" / "fixtures" / "gpu" / "gb10" / "meminfo.txt"
E, W, OK = Severity.ERROR, Severity.WARN, Severity.OK


@pytest.fixture(scope="module")
def profile():
    return load_profile_file(ROOT / "profiles" / "dual-spark.yaml")


def sev(findings: list[Finding]) -> list[Severity]:
    return [f.severity for f in findings]


def test_mtu_1500_is_an_error_naming_node_and_netdev(profile) -> None:
    node = profile.node("spark2")
    devs = {"enp1s0f1np1": Netdev("enp1s0f1np1", 1500, "UP", ("UP", "LOWER_UP"), ("192.168.100.11/24",))}
    found = check_fabric_netdevs(node, devs, 9000)
    mtu = next(f for f in found if f.check == "Mtu")
    assert mtu.severity is E and "spark2" in mtu.message and "enp1s0f1np1" in mtu.message
    assert "mtu 9000" in mtu.fix and mtu.key == "Mtu-spark2"
    assert next(f for f in found if f.check == "FabricNetdev").severity is OK


def test_missing_netdev_and_ip_elsewhere(profile) -> None:
    devs = {"eth0": Netdev("eth0", 1500, "UP", ("UP", "LOWER_UP"), ("192.168.100.11/24",))}
    found = check_fabric_netdevs(profile.node("spark2"), devs, 9000)
    msgs = " | ".join(f.message for f in found if f.severity is E)
    assert "enp1s0f1np1 does not exist (present: eth0)" in msgs and "it is on eth0" in msgs


def img(i: str, layers=("l1",)) -> ImageFacts:
    return ImageFacts("sglang-dflash:spark", i, 10 << 30, tuple(layers), "2026-01-01")


def test_preflight_says_what_the_rank_runs_in_place_of_the_images_entrypoint() -> None:
    from sparkctl.facts.docker import image_facts_from_inspect
    from sparkctl.preflight.checks.image import override_note

    shapes = {  # vllm/vllm-openai, nvcr.io/nvidia/vllm's script, lmsysorg/sglang's none
        "openai": ({"Entrypoint": ["vllm", "serve"], "Cmd": None}, "ENTRYPOINT ['vllm', 'serve'] CMD []"),
        "nvidia": (
            {"Entrypoint": ["/opt/nvidia/nvidia_entrypoint.sh"], "Cmd": ["/bin/bash"]},
            "ENTRYPOINT ['/opt/nvidia/nvidia_entrypoint.sh'] CMD ['/bin/bash']",
        ),
        "sglang": ({"Entrypoint": None, "Cmd": ["/bin/bash"]}, "(no ENTRYPOINT) CMD ['/bin/bash']"),
    }
    for config, said in shapes.values():
        facts = image_facts_from_inspect("r", {"Id": "sha256:aa", "Config": config})
        assert (
            override_note(facts, ["vllm", "serve"])
            == f"ranks run `vllm serve ...` in place of the image's {said}"
        )


def test_images_missing_and_different() -> None:
    found = check_images("ref", {"spark1": img("sha256:aa"), "spark2": None}, "spark1", None, "ref")
    missing = next(f for f in found if f.severity is E)
    assert (
        missing.check == "ImagePresent"
        and missing.node == "spark2"
        and "ship --image --to spark2" in missing.fix
    )
    found = check_images(
        "ref", {"spark1": img("sha256:aa"), "spark2": img("sha256:bb", ("l2",))}, "spark1", None, "ref"
    )
    other = next(f for f in found if f.severity is E)
    assert (
        other.check == "ImageSame" and other.node == "spark2" and "sha256:bb" in other.message and other.fix
    )
    pinned = "sha256:" + "c" * 64
    found = check_images("ref", {"spark1": img("sha256:aa")}, "spark1", pinned, "ref")
    assert any(f.check == "ImageSame" and f.severity is E and "image.id" in f.fix for f in found)


def test_same_layers_other_id_is_a_warning() -> None:
    found = check_images("ref", {"a": img("sha256:aa"), "b": img("sha256:bb")}, "a", None, "ref")
    assert [f.severity for f in found if f.check == "ImageSame"] == [OK, W]


def test_weights_missing_and_drift() -> None:
    c1, c2 = "1" * 40, "2" * 40
    listings = {"spark1": RepoListing(True, {"main": c1}, {c1: 5}), "spark2": RepoListing(False)}
    found, commits = check_weights("target", "org/m", "main", listings, {"spark1": "/hf", "spark2": "/hf"})
    assert (
        sev(found) == [OK, E] and commits == {"spark1": c1} and "ship --weights --to spark2" in found[1].fix
    )
    listings["spark2"] = RepoListing(True, {"main": c2}, {c2: 5})
    found, _ = check_weights("target", "org/m", "main", listings, {"spark1": "/hf", "spark2": "/hf"})
    assert found[-1].severity is E and "different commits" in found[-1].message


def test_weights_are_judged_as_the_engine_opens_them_offline() -> None:
    """Issue 46: a short prefix resolves for sparkctl but not for huggingface_hub offline; a node
    without the refs/main another node has to the same commit fails a start by hand."""
    c1 = "1" * 40
    both = {"spark1": RepoListing(True, {"main": c1}, {c1: 5}), "spark2": RepoListing(True, {}, {c1: 5})}
    found, commits = check_weights("target", "org/m", c1, both, {"spark1": "/hf", "spark2": "/hf"})
    assert commits == {"spark1": c1, "spark2": c1}
    warn = [f for f in found if f.severity is W]
    assert [f.node for f in warn] == ["spark2"] and "no refs/main" in warn[0].message
    assert "ship --weights --to spark2" in warn[0].fix and not [f for f in found if f.severity is E]
    found, _ = check_weights("target", "org/m", "1111111", both, {"spark1": "/hf", "spark2": "/hf"})
    short = [f for f in found if f.severity is E]
    assert {f.node for f in short} == {"spark1", "spark2"} and "only a prefix" in short[0].message
    assert f"the full commit {c1}" in short[0].fix
    both["spark2"] = RepoListing(True, {"main": c1}, {c1: 5})
    found, _ = check_weights("target", "org/m", "main", both, {"spark1": "/hf", "spark2": "/hf"})
    assert sev(found) == [OK, OK]


def test_disk_free() -> None:
    disk = DiskUsage("/var/lib/docker", "/", 100 << 20, 5 << 20)  # 5 GiB free
    (f,) = check_disk("spark2", {"image": (10 << 30, disk)})
    assert f.severity is E and "10.0 GiB" in f.message
    (f,) = check_disk("spark2", {"image": (0, disk), "weights": (1 << 30, disk)})  # same filesystem: summed
    assert f.severity is OK and "image + weights" in f.message


def test_ports_and_stray_containers(profile) -> None:
    plan = build_plan(profile, "tp2")
    r0 = plan.ranks[0]
    ours = ContainerFacts("1", r0.container_name, "running", "img", dict(r0.labels))
    found = check_ports("spark1", {8888, 50051}, {8888: "HTTP", 50051: "dist-init"}, [ours], plan)
    assert sev(found) == [OK, OK]
    found = check_ports("spark1", {8888}, {8888: "HTTP"}, [], plan)
    assert found[0].severity is E and "ss -ltnp" in found[0].fix
    manual = ContainerFacts("2", r0.container_name, "running", "x", {})
    leftover = ContainerFacts(
        "3", "old", "exited", "x", {"sparkctl.cluster": profile.cluster, "sparkctl.mode": "gone"}
    )
    solo = ContainerFacts(
        "4",
        "sparkctl-sparkduo-solo-r0",
        "running",
        "x",
        {"sparkctl.cluster": profile.cluster, "sparkctl.mode": "solo"},
    )
    found = check_stray("spark1", [manual, leftover, solo, ours], plan, profile)
    assert sev(found) == [E, E, W, OK]
    assert "not sparkctl's" in found[0].message and "docker rm -f old" in found[1].fix


def test_unified_memory_on_gb10() -> None:
    mem = parse_meminfo(GB10_MEMINFO.read_text())  # captured on a GB10: ~113 GiB available
    assert check_unified_memory("spark1", mem, 60 << 30, 0.9, flag="mem-fraction-static").severity is OK
    bad = check_unified_memory("spark1", mem, 110 << 30, 0.9, flag="mem-fraction-static")
    assert bad.severity is E and "MemAvailable 113.1 GiB" in bad.message and "drop_caches" in bad.fix
    cached = {**mem, "MemFree": 20 << 20}  # 20 GiB free, the rest page cache
    warn = check_unified_memory("spark1", cached, 60 << 30, 0.9, flag="mem-fraction-static")
    assert warn.severity is W and "page cache" in warn.message
    assert mem_fraction(["x", "--mem-fraction-static", "0.9"]) == 0.9
    # An engine without a memory model (no fraction reserved): the weights against all of it.
    whole = check_unified_memory("spark1", mem, 60 << 30, 1.0, flag=None)
    assert whole.severity is OK and "(weights 60.0 GiB + 4.0 GiB KV)" in whole.message


def test_docker_gpu_runtime() -> None:
    facts = DockerFacts("27.0", ("runc",), "runc", "/var/lib/docker")
    assert sev(check_docker("n", facts, True, False)) == [OK, E]
    assert sev(check_docker("n", facts, True, True)) == [OK, OK]
    assert sev(check_docker("n", facts, False, None)) == [OK]


def test_names() -> None:
    assert set(CHECKS) >= FAST_CHECKS
    assert validate_names({"mtu", "all"}, "--ignore") == set(CHECKS)
    with pytest.raises(UsageError) as exc:
        validate_names({"Mut"}, "--ignore")
    assert "did you mean 'Mtu'" in exc.value.fix


def test_ignore_downgrades_errors_only() -> None:
    found = [
        Finding("Mtu", E, "m", node="a"),
        Finding("PingDf", E, "p", node="a"),
        Finding("DriverDrift", E, "d"),
    ]
    out = _apply_ignore(found, {"Mtu", "Gpus"})
    assert sev(out) == [W, E, W] and out[0].message.endswith("[ignored]")


def test_weights_content_names_the_differing_files() -> None:
    from sparkctl.remote.manifest import FileEntry, Manifest

    def manifest(node: str, shas: dict[str, str]) -> Manifest:
        return Manifest(
            node, "o/m", "main", "/r", "c" * 40, {k: FileEntry(v, 1, None) for k, v in shas.items()}
        )

    ref = manifest("spark1", {"a.safetensors": "1" * 64, "config.json": "2" * 64})
    same = manifest("spark2", {"a.safetensors": "1" * 64, "config.json": "2" * 64})
    bad = manifest("spark3", {"a.safetensors": "9" * 64, "config.json": "2" * 64})
    found = check_weights_content("target", "o/m", {"spark1": ref, "spark2": same, "spark3": bad}, "spark1")
    by_node = {f.node: f for f in found}
    assert by_node["spark2"].severity == "ok"
    assert by_node["spark3"].severity == "error" and by_node["spark3"].data["differ"] == ["a.safetensors"]
    assert "--to spark3" in by_node["spark3"].fix


def test_launch_check_names_are_valid_for_ignore_and_only() -> None:
    from sparkctl.engines.sglang.launch import CHECK_NAMES
    from sparkctl.preflight.registry import validate_names

    assert validate_names({"memoryfit", "FlagsValid"}, "--ignore", set(CHECK_NAMES)) == {
        "MemoryFit",
        "FlagsValid",
    }


@pytest.mark.parametrize("name", ["dual-spark.yaml", "two-gpu-box.yaml", "solo-spark.yaml"])
def test_every_launch_finding_has_a_registered_name(name: str) -> None:
    from pathlib import Path

    from sparkctl.engines.sglang.launch import CHECK_NAMES
    from sparkctl.engines.sglang.launch.pipeline import check_plan
    from sparkctl.planning.build import build_plan
    from sparkctl.profile import load_profile_file

    root = Path(__file__).resolve().parents[3]
    prof = load_profile_file(root / "profiles" / name)
    models = root / "tests" / "fixtures" / "models"
    target = models / ("qwen3.6-27b-gptq-int4" if "two-gpu" in name else "qwen3.6-27b-nvfp4")
    for mode in prof.modes:
        result = check_plan(
            build_plan(prof, mode),
            prof,
            parse_flags=False,
            target_dir=target,
            draft_dir=models / "qwen3.6-27b-dflash",
        )
        assert result.findings and {f.check for f in result.findings} <= CHECK_NAMES


def test_weights_on_no_node_suggest_a_download_not_ship() -> None:
    listings = {"spark1": RepoListing(False), "spark2": RepoListing(False)}
    found, commits = check_weights("target", "org/m", "abc123", listings, {"spark1": "/hf", "spark2": "/h2"})
    assert sev(found) == [E, E] and not commits
    assert all("ship" not in f.fix for f in found)
    assert "`HF_HOME=/h2 hf download org/m --revision abc123` on spark2" in found[1].fix
