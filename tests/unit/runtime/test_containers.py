"""runtime/containers.py: what Docker's inspect document says of a rank's container (its state,
exit, times, labels), read without a daemon."""

from __future__ import annotations

from datetime import UTC, datetime

from sparkctl.runtime.containers import info_from_attrs, parse_docker_time


def test_an_exited_container_is_read_with_its_exit_code_and_times() -> None:
    info = info_from_attrs(
        "spark2",
        {
            "Name": "/sparkctl-c-tp2-r1",
            "Id": "abc",
            "Image": "sha256:1",
            "State": {
                "Status": "exited",
                "ExitCode": 137,
                "OOMKilled": True,
                "StartedAt": "2026-01-02T03:04:05.123456789Z",
                "FinishedAt": "0001-01-01T00:00:00Z",
            },
            "Config": {"Image": "lmsysorg/sglang:x", "Labels": {"org.sparkctl.cluster": "c"}},
        },
    )
    assert (info.node, info.name, info.status, info.exit_code, info.oom_killed) == (
        "spark2",
        "sparkctl-c-tp2-r1",
        "exited",
        137,
        True,
    )
    assert info.started_at == datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    assert info.image == "lmsysorg/sglang:x" and info.labels == {"org.sparkctl.cluster": "c"}


def test_a_running_container_has_no_exit_code_and_a_missing_time_is_none() -> None:
    info = info_from_attrs("spark1", {"State": {"Status": "running", "ExitCode": 0}})
    assert info.exit_code is None and info.name == "" and info.labels == {}
    assert parse_docker_time(None) is None


def test_launch_params_run_exactly_the_argv_whatever_the_image() -> None:
    from sparkctl.runtime.containers import launch_params

    got = launch_params(["vllm", "serve", "org/m", "--port", "8000"])
    assert got == {"entrypoint": ["vllm"], "command": ["serve", "org/m", "--port", "8000"]}
    assert launch_params(["python3"]) == {"entrypoint": ["python3"], "command": []}
