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
