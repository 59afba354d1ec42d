"""The image NCCL listing parser (what the short container prints) and the image env filter."""

from __future__ import annotations

from pathlib import Path

from sparkctl.facts.nccl_image import SCRIPT, env_of, parse_conf, parse_listing

FIX = Path(__file__).parents[2] / "fixtures" / "nccl" / "listing.txt"


def test_listing_gives_conf_keys_and_both_nccls() -> None:
    got = parse_listing(FIX.read_text(), {"NCCL_DEBUG": "INFO"})
    assert got.conf == {
        "/etc/nccl.conf": {"NCCL_IB_USE_INLINE": "1", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "WARN"}
    }
    assert got.system == {"/usr/lib/aarch64-linux-gnu/libnccl.so.2.21.5": "2.21.5"}
    assert list(got.pip.values()) == ["2.27.3"] and got.versions == {"2.21.5", "2.27.3"}
    assert got.env == {"NCCL_DEBUG": "INFO"}


def test_no_conf_no_libs() -> None:
    got = parse_listing("#sparkctl-nccl libs\n#sparkctl-nccl end\n")
    assert got.conf == {} and got.versions == set()


def test_conf_format_and_image_env() -> None:
    assert parse_conf("A=1 # c\n# B=2\n\nC = x=y\n") == {"A": "1", "C": "x=y"}
    attrs = {"Config": {"Env": ["PATH=/usr/bin", "NCCL_P2P_DISABLE=1", "LD_LIBRARY_PATH=/opt/nccl/lib"]}}
    assert env_of(attrs) == {"NCCL_P2P_DISABLE": "1", "LD_LIBRARY_PATH": "/opt/nccl/lib"}


def test_script_runs_in_a_posix_sh(tmp_path) -> None:
    import subprocess

    conf = tmp_path / ".nccl.conf"
    conf.write_text("NCCL_ALGO=Tree\n")
    out = subprocess.run(
        ["sh", "-c", SCRIPT],
        capture_output=True,
        text=True,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert parse_listing(out.stdout).conf == {str(conf): {"NCCL_ALGO": "Tree"}}


BUILDS = """#sparkctl-nccl libs
/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2
/usr/local/lib/python3.12/dist-packages/nvidia_nccl_cu13-2.28.9.dist-info
/usr/lib/aarch64-linux-gnu/libnccl.so.2
/usr/lib/aarch64-linux-gnu/libnccl.so.2.28.9
#sparkctl-nccl builds
{a}  /usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2
{b}  /usr/lib/aarch64-linux-gnu/libnccl.so.2.28.9
#sparkctl-nccl end
"""


def test_builds_are_read_per_file_and_keyed_by_the_version_each_file_is() -> None:
    got = parse_listing(BUILDS.format(a="a" * 64, b="b" * 64))
    assert got.builds == {
        "/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2": "a" * 64,
        "/usr/lib/aarch64-linux-gnu/libnccl.so.2.28.9": "b" * 64,
    }
    # pip's libnccl.so.2 has no version in its name: the wheel beside it says 2.28.9
    assert got.identities == {"2.28.9": {"a" * 64, "b" * 64}}
    assert got.to_json()["builds"] == got.builds


def test_the_host_probe_is_the_same_listing_as_an_argv() -> None:
    from sparkctl.facts.nccl_image import HOST_ARGV, host_nccl_probe

    probe = host_nccl_probe()
    assert probe.argv == HOST_ARGV and HOST_ARGV[:2] == ("sh", "-c") and "sha256sum" in HOST_ARGV[2]
    import subprocess

    res = subprocess.run(list(HOST_ARGV), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.rstrip().endswith("#sparkctl-nccl end")
