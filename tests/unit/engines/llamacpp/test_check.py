"""llama.cpp's launch check: rank 0's flag names against llama-server's `--help`, the image's or the release's."""

from __future__ import annotations

import pytest

from sparkctl.engines import get_engine
from sparkctl.engines.llamacpp import check as C
from sparkctl.engines.support.launch_check import LaunchRequest
from sparkctl.findings import Severity
from sparkctl.planning.build import build_plan
from tests.unit.engines.llamacpp.test_engine import profile

# common/arg.cpp's layout: names at column 0 (a short one padded to 7), help from column 40, or
# on the next line when the names run past 37; headings and continuations are not options.
HELP = "\n".join(
    [
        "----- common params -----",
        "",
        "-h,    --help, --usage                  print usage and exit",
        "-c,    --ctx-size N                     size of the prompt context (default: 4096, 0 = loaded",
        "                                        from model); see --not-an-option-here",
        "-ngl,  --gpu-layers, --n-gpu-layers N   max. number of layers to store in VRAM",
        "--mmap, --no-mmap                       whether to memory-map model (default: enabled)",
        "--slots, --no-slots                     expose slots monitoring endpoint (default: enabled)",
        "--override-tensor-draft, -otd <tensor name pattern>=<buffer type>,...",
        "                                        override tensor buffer type for draft model",
        "-m,    --model FNAME                    model path to load",
        "--alias STRING                          set alias for model name (to be used by REST API)",
        "--host HOST                             ip address to listen",
        "--port PORT                             port to listen (default: 8080)",
        "--api-key-file FNAME                    path to file containing API keys (default: none)",
        "--metrics                               enable prometheus compatible metrics endpoint",
        "--fim-qwen-1.5b-default                 use default Qwen 2.5 Coder 1.5B (note: can download weights",
    ]
)


def test_the_help_gives_every_name_of_an_option_line_and_nothing_of_its_prose() -> None:
    known = C.help_options(HELP)
    assert {"help", "usage", "ctx-size", "gpu-layers", "n-gpu-layers", "mmap", "no-mmap"} <= known
    assert {"slots", "no-slots", "override-tensor-draft", "model", "api-key-file"} <= known
    assert "fim-qwen-1.5b-default" in known  # a dot inside a name (the real --help has one)
    assert "not-an-option-here" not in known  # a continuation line's mention
    assert not any(k.startswith("-") or k in ("common", "params") for k in known)  # the heading


def test_a_misspelled_flag_is_an_error_that_names_the_nearest_option() -> None:
    plan = build_plan(profile(args={"ctx-sise": 4096}), "solo")
    (bad,) = [f for f in C.flag_findings(plan, profile(), None) if f.severity == Severity.ERROR]
    assert bad.check == "LlamaCppFlags" and bad.node == "box1" and bad.rank == 0
    assert "--ctx-sise is not a llama-server option" in bad.message
    assert "--ctx-size?" in (bad.fix or "")


def test_known_flags_pass_and_the_finding_says_which_list_judged_them() -> None:
    plan = build_plan(profile(), "solo")
    (ok,) = C.flag_findings(plan, profile(), None)
    assert ok.severity == Severity.OK and "the image's own were not asked" in ok.message


class _Pool:
    def get(self, node: str) -> object:
        return node


def test_the_images_own_help_judges_when_rank0s_node_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def runner(conn, image, **kw):  # noqa: ANN001, ANN003, ANN202 - in_image.image_runner's shape
        assert conn == "box1" and image == "ghcr.io/ggml-org/llama.cpp:server-cuda"
        return lambda argv: (calls.append(argv), (0, HELP, ""))[1]

    monkeypatch.setattr("sparkctl.engines.support.in_image.image_runner", runner)
    plan = build_plan(profile(args={"threads": 4}), "solo")
    found = C.flag_findings(plan, profile(), _Pool())  # type: ignore[arg-type]
    assert calls == [["/app/llama-server", "--help"]]  # the program the rank runs
    (bad,) = found  # this image's help knows no --threads (HELP is an excerpt)
    assert bad.severity == Severity.ERROR and "--threads" in bad.message
    assert "the options of ghcr.io/ggml-org/llama.cpp:server-cuda's llama-server" in bad.message


def test_an_image_that_cannot_answer_falls_back_to_the_release_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sparkctl.engines.support.in_image import InImageError

    def runner(conn, image, **kw):  # noqa: ANN001, ANN003, ANN202
        def run(argv: list[str]):  # noqa: ANN202
            raise InImageError("image x is not present on box1")

        return run

    monkeypatch.setattr("sparkctl.engines.support.in_image.image_runner", runner)
    plan = build_plan(profile(), "solo")
    warn, ok = C.flag_findings(plan, profile(), _Pool())  # type: ignore[arg-type]
    assert warn.severity == Severity.WARN and "not present on box1" in warn.message
    assert ok.severity == Severity.OK and "llama.cpp" in ok.message


def test_fit_and_plan_check_offline_judge_by_the_release_and_preflight_names_the_check() -> None:
    launch = get_engine("llamacpp").launch
    assert launch is not None and launch.check_names() == {"LlamaCppFlags"}
    plan = build_plan(profile(args={"no-such-flag": True}), "solo")
    result = launch.launch_check(plan, profile(), LaunchRequest(reach=False))
    assert [f.message.split(" is ")[0] for f in result.errors] == ["--no-such-flag"]
    assert result.memory is None  # llama.cpp plans no memory


def test_a_node_that_does_not_answer_is_judged_by_the_release_list() -> None:
    from sparkctl.errors import ConnectError

    class Down:
        def get(self, node: str) -> object:
            raise ConnectError(f"cannot reach {node}")

    plan = build_plan(profile(), "solo")
    warn, ok = C.flag_findings(plan, profile(), Down())  # type: ignore[arg-type]
    assert warn.severity == Severity.WARN and "cannot reach box1" in warn.message
    assert ok.severity == Severity.OK
