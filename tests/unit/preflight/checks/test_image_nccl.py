"""ImageNccl: what a baked nccl.conf / NCCL_* env / second NCCL does to the ranks, judged per node."""

from __future__ import annotations

from pathlib import Path

from sparkctl.facts.nccl_image import parse_listing
from sparkctl.findings import Severity
from sparkctl.preflight.checks.image_nccl import judge_image, judge_versions

FIX = Path(__file__).parents[3] / "fixtures" / "nccl" / "listing.txt"
PLAN_ENV = {"NCCL_SOCKET_IFNAME": "enp1s0f1np1", "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1"}


def test_inline_conf_is_an_error_and_an_overridden_key_is_said() -> None:
    found = judge_image("spark2", parse_listing(FIX.read_text()), PLAN_ENV)
    by = {f.message.split(" sets ")[1].split("=")[0] if " sets " in f.message else "libs": f for f in found}
    assert (
        by["NCCL_IB_USE_INLINE"].severity is Severity.ERROR
        and "/etc/nccl.conf" in by["NCCL_IB_USE_INLINE"].message
    )
    assert "engine.env: {NCCL_IB_USE_INLINE" in by["NCCL_IB_USE_INLINE"].fix
    assert (
        by["NCCL_SOCKET_IFNAME"].severity is Severity.OK and "overridden" in by["NCCL_SOCKET_IFNAME"].message
    )
    assert by["NCCL_DEBUG"].severity is Severity.WARN
    assert (
        by["libs"].severity is Severity.WARN
        and "2.21.5" in by["libs"].message
        and "2.27.3" in by["libs"].message
    )
    assert all(f.node == "spark2" for f in found)


def test_two_nccls_name_the_engines_own_library_variable_only_when_it_has_one() -> None:
    got = parse_listing(FIX.read_text())
    libs = lambda found: next(f for f in found if f.message.startswith("two NCCLs"))  # noqa: E731
    named = libs(judge_image("spark2", got, PLAN_ENV, nccl_library_env="ENG_NCCL_SO_PATH"))
    assert "engine.env: {ENG_NCCL_SO_PATH: " in named.fix and "libnccl.so.2}" in named.fix
    assert libs(judge_image("spark2", got, PLAN_ENV)).fix == "remove one from the image"


def test_clean_image_is_one_ok_with_its_version() -> None:
    got = parse_listing("#sparkctl-nccl libs\n/x/dist-packages/nvidia_nccl_cu12-2.27.3.dist-info\n")
    (f,) = judge_image("spark1", got, PLAN_ENV)
    assert f.severity is Severity.OK and "NCCL 2.27.3" in f.message


def test_image_env_and_version_drift_across_nodes() -> None:
    a = parse_listing("#sparkctl-nccl libs\n/x/dist-packages/nvidia_nccl_cu12-2.27.3.dist-info\n")
    b = parse_listing(
        "#sparkctl-nccl libs\n/x/dist-packages/nvidia_nccl_cu12-2.26.2.dist-info\n", {"NCCL_P2P_DISABLE": "1"}
    )
    (env,) = judge_image("spark2", b, PLAN_ENV)
    assert env.severity is Severity.ERROR and "the image's env sets NCCL_P2P_DISABLE=1" in env.message
    (drift,) = judge_versions({"spark1": a, "spark2": b})
    assert drift.severity is Severity.ERROR and "spark1 2.27.3, spark2 2.26.2" in drift.message
    assert judge_versions({"spark1": a, "spark2": a}) == []


def test_a_mode_without_nccl_only_warns() -> None:
    found = judge_image("spark1", parse_listing(FIX.read_text()), {}, uses_nccl=False)
    inline = next(f for f in found if "NCCL_IB_USE_INLINE" in f.message)
    assert inline.severity is Severity.WARN and "unused while every replica runs on one GPU" in inline.message


def _nccl(digest: str, version: str = "2.28.9") -> object:
    site = "/usr/local/lib/python3.12/dist-packages"
    return parse_listing(
        f"#sparkctl-nccl libs\n{site}/nvidia/nccl/lib/libnccl.so.2\n{site}/nvidia_nccl_cu13-{version}.dist-info\n"
        f"#sparkctl-nccl builds\n{digest * 64}  {site}/nvidia/nccl/lib/libnccl.so.2\n#sparkctl-nccl end\n"
    )


def test_two_builds_of_one_version_in_the_image_and_on_the_host_are_told_apart() -> None:
    from sparkctl.preflight.checks.image_nccl import judge_host

    (f,) = judge_host("spark1", _nccl("b"), _nccl("a"))
    assert f.severity is Severity.ERROR and "NCCL 2.28.9" in f.message and "different builds" in f.message
    assert "aaaaaaaaaaaa" in f.message and "bbbbbbbbbbbb" in f.message and "#41725" in f.message
    assert judge_host("spark1", _nccl("a"), _nccl("a")) == []  # the same build: nothing to say
    assert judge_host("spark1", _nccl("b", "2.27.3"), _nccl("a")) == []  # other versions: not this check
    (one_gpu,) = judge_host("spark1", _nccl("b"), _nccl("a"), uses_nccl=False)
    assert one_gpu.severity is Severity.WARN


def test_one_version_but_two_builds_across_nodes_is_an_error() -> None:
    (f,) = judge_versions({"spark1": _nccl("a"), "spark2": _nccl("c")})
    assert f.severity is Severity.ERROR and "one version but different builds across nodes" in f.message
    assert (
        "spark1: 2.28.9 sha256 aaaaaaaaaaaa" in f.message
        and "spark2: 2.28.9 sha256 cccccccccccc" in f.message
    )
    assert judge_versions({"spark1": _nccl("a"), "spark2": _nccl("a")}) == []
