"""`.ci/run` stays quiet: no pip resolver error from the deliberate `--no-deps` SGLang install."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_deps_sglang_is_the_last_pip_install() -> None:
    """pip reports a package's missing dependencies whenever a later install touches one of them
    (transformers, openai, ...); `--no-deps` installs skip that check. So SGLang goes in last."""
    lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    installs = [ln for ln in lines if ln.startswith("python3 -m pip install")]
    assert installs and "--no-deps sglang==" in installs[-1], installs
    assert sum("sglang" in ln for ln in installs) == 1


def _report(tmp_path: Path, cases: str) -> Path:
    path = tmp_path / "r.xml"
    path.write_text(f'<testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>')
    return path


def test_the_test_report_counts_every_outcome_and_lists_the_slowest(tmp_path: Path, capsys) -> None:
    import scripts.test_report as report

    xml = _report(
        tmp_path,
        '<testcase classname="a" name="fast" time="0.1"/>'
        '<testcase classname="a" name="slow" time="9.5"><failure message="x"/></testcase>'
        '<testcase classname="b" name="skip" time="0.0"><skipped message="y"/></testcase>',
    )
    assert report.main([str(xml)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "total: 1 passed, 1 failed, 1 skipped"
    slowest = [ln for ln in out if "::" in ln]
    assert slowest[0].split() == ["9.50s", "a::slow", "(failed)"]


def test_the_test_report_fails_when_no_test_ran(tmp_path: Path) -> None:
    import scripts.test_report as report

    assert report.main([str(_report(tmp_path, ""))]) == 1
    assert report.main([str(tmp_path / "missing.xml")]) == 1
