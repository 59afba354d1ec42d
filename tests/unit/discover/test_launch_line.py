"""A pasted line split as a shell would, never run by one: the docker run prefix, VAR=value words,
continuations, quoting, and the (flag, values) items the engines read."""

from __future__ import annotations

import pytest

from sparkctl.discover.launch_line import items, parse_line, split_line
from sparkctl.errors import UsageError


def test_docker_prefix_image_env_mounts_shm_and_ignored_options() -> None:
    line = parse_line(
        "sudo docker run --rm -it --gpus all --ipc=host --shm-size 32gb -p 30000:30000 "
        "-e NCCL_SOCKET_IFNAME=enp1s0f1np1 --env=HF_TOKEN=t -v /data/hf:/root/.cache/huggingface:ro "
        "lmsysorg/sglang:v0.5.23 python3 -m sglang.launch_server --model-path a/b"
    )
    c = line.container
    assert c is not None and c.image == "lmsysorg/sglang:v0.5.23" and c.shm_size == "32g"
    assert c.volumes == [("/data/hf", "/root/.cache/huggingface")]
    assert line.env == {"NCCL_SOCKET_IFNAME": "enp1s0f1np1", "HF_TOKEN": "t"}
    assert c.ignored == ["--gpus", "--ipc", "-p"]
    assert line.words == ["python3", "-m", "sglang.launch_server", "--model-path", "a/b"]


def test_image_entrypoint_takes_the_flags() -> None:
    line = parse_line("docker run -d vllm/vllm-openai:v0.32.0 --model a/b")
    assert line.container and line.container.image == "vllm/vllm-openai:v0.32.0"
    assert line.words == ["--model", "a/b"]


def test_env_words_and_continuations() -> None:
    line = parse_line("CUDA_VISIBLE_DEVICES=0,1 env NCCL_DEBUG=INFO vllm serve a/b \\\n  --port 8000")
    assert line.container is None
    assert line.env == {"CUDA_VISIBLE_DEVICES": "0,1", "NCCL_DEBUG": "INFO"}
    assert line.words == ["vllm", "serve", "a/b", "--port", "8000"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("vllm serve a/b && echo done", "'&&' joins several commands"),
        ("vllm serve a/b > log", "'>' joins several commands"),
        ("vllm serve 'a/b", "cannot split the line"),
        ("   ", "the line is empty"),
        ("docker run --rm", "names no image"),
    ],
)
def test_refused_lines(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_line(text)


def test_quotes_stay_one_word_and_nothing_is_expanded() -> None:
    assert split_line("x --a 'b c' --d \"$HOME\" --e `id`") == [
        "x",
        "--a",
        "b c",
        "--d",
        "$HOME",
        "--e",
        "`id`",
    ]


def test_items_grammar() -> None:
    words = ["m", "--a", "1", "--b", "--c=x", "pos", "--d", "-1", "2", "-tp", "2"]
    assert items(words) == [
        ("", ["m"]),
        ("--a", ["1"]),
        ("--b", []),
        ("--c", ["x"]),
        ("", ["pos"]),
        ("--d", ["-1", "2"]),
        ("-tp", ["2"]),
    ]


def test_a_shell_c_wrapper_is_opened_and_its_line_read_the_same_way() -> None:
    line = parse_line(
        "docker run -e A=1 lmsysorg/sglang:v0.5.23 bash -c 'B=2 python3 -m sglang.launch_server --model-path \"a/b\"'"
    )
    assert line.container is not None and line.env == {"A": "1", "B": "2"}
    assert line.words == ["python3", "-m", "sglang.launch_server", "--model-path", "a/b"]
    with pytest.raises(UsageError, match="'&&' joins several commands"):
        parse_line("docker run x/y:1 sh -c 'pip install z && vllm serve a/b'")


def test_a_script_pasted_whole_comments_and_exec() -> None:
    script = "#!/bin/bash\n# rank 0\nexec vllm serve a/b \\\n  --port 8000  # the API\n"
    assert parse_line(script).words == ["vllm", "serve", "a/b", "--port", "8000"]
    assert split_line("x --chat-template '#not a comment'") == ["x", "--chat-template", "#not a comment"]
