"""profile/load.py + yaml_model.py on hostile input: one error line with its fix, exit 2, no
traceback, no hang, bounded size (issue 42)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sparkctl.cli import app
from sparkctl.errors import ExitCode, ProfileError, SparkctlError
from sparkctl.profile import load_profile_file, load_profile_text

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = (ROOT / "profiles" / "two-gpu-box.yaml").read_bytes()


def laughs(levels: int) -> str:
    """Nested aliases: each level holds nine aliases of the one below (9**levels values)."""
    out = ['a0: &a0 ["lol"]']
    for i in range(1, levels + 1):
        out.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(out) + f"\ncluster: *a{levels}\n"


def refused(text: str | bytes, tmp_path: Path) -> ProfileError:
    path = tmp_path / "p.yaml"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    with pytest.raises(ProfileError) as exc:
        load_profile_file(path)
    assert exc.value.exit_code == ExitCode.USAGE and exc.value.fix
    assert "\n" not in exc.value.message, exc.value.message
    return exc.value


def test_nested_aliases_are_refused_before_anything_expands_them(tmp_path: Path) -> None:
    """8 levels: 43 million values. Today the line index alone follows 9**8 aliases (hangs)."""
    err = refused(laughs(8), tmp_path)
    assert "aliases expand" in err.message and ":5:" in err.message, err.message


def test_a_self_referencing_alias_is_refused(tmp_path: Path) -> None:
    """Was a RecursionError traceback."""
    err = refused("cluster: &a [x, *a]\nnodes: []\nmodes: {}\n", tmp_path)
    assert "contains it" in err.message and ":1:" in err.message, err.message
    err = refused("engine: &e\n  args:\n    x: *e\ncluster: c\n", tmp_path)
    assert "contains it" in err.message, err.message


def test_a_few_plain_aliases_still_load() -> None:
    text = SHIPPED.decode().replace("engine:", "x-shared: &shared {}\nengine:", 1)
    with pytest.raises(SparkctlError, match="x-shared"):  # unknown key, not an alias refusal
        load_profile_text(text)


def test_a_byte_that_is_not_utf8_names_its_line(tmp_path: Path) -> None:
    """One Latin-1 byte in a comment was a UnicodeDecodeError traceback."""
    err = refused(b"# caf\xe9\n" + SHIPPED, tmp_path)
    assert ":1: not UTF-8" in err.message and "0xe9" in err.message, err.message
    assert "iconv" in (err.fix or "")


def mutated() -> st.SearchStrategy[bytes]:
    """The shipped profile with bytes replaced, inserted or cut; or YAML-ish noise."""
    cut = st.tuples(st.integers(0, len(SHIPPED)), st.integers(0, 64), st.binary(max_size=24))
    edits = st.lists(cut, min_size=1, max_size=4)
    noise = st.text(alphabet=st.sampled_from(list("&*[]{}:,-!|>'\"#% \n\tab01~")), max_size=200)
    return st.one_of(
        edits.map(lambda es: _apply(SHIPPED, es)),
        noise.map(str.encode),
        st.binary(max_size=200),
    )


def _apply(data: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    for at, length, new in edits:
        data = data[:at] + new + data[at + length :]
    return data


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=mutated())
def test_fuzz_profile_check_is_one_line_and_exit_2_or_ok(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "fuzz.yaml"
    path.write_bytes(data)
    res = CliRunner().invoke(app, ["profile", "check", "-p", str(path)], env={"COLUMNS": "80"})
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output
    assert res.exit_code in (ExitCode.OK, ExitCode.USAGE), (res.exit_code, res.output)
    assert len(res.output) < 20_000  # bounded: no echo of an expanded document
    if res.exit_code == ExitCode.USAGE:
        first = res.output.lstrip().splitlines()[0]
        assert first.startswith("error"), res.output
        assert "fix:" in res.output, res.output


def _error(mutate) -> ProfileError:  # noqa: ANN001
    import yaml

    data = yaml.safe_load((ROOT / "profiles" / "dual-spark.yaml").read_text())
    mutate(data)
    with pytest.raises(ProfileError) as exc:
        load_profile_text(yaml.safe_dump(data, sort_keys=False), "p.yaml")
    return exc.value


def test_did_you_mean_knows_synonyms_and_where_a_key_belongs() -> None:
    """`host:` on a node suggested 'port'; `hcas:` on a node suggested 'hf_cache'."""
    err = _error(lambda d: d["nodes"][1].__setitem__("host", d["nodes"][1].pop("address")))
    assert "nodes[1].host: unknown key" in err.message and "'address'" in (err.fix or ""), err
    err = _error(lambda d: d["nodes"][1].__setitem__("hcas", ["rocep1s0f1"]))
    assert "belongs under nodes[].fabric" in (err.fix or ""), err.fix


def test_a_missing_key_says_what_to_add() -> None:
    err = _error(lambda d: d.pop("cluster"))
    assert (err.fix or "").startswith("add `cluster:` under the top level (Cluster name"), err.fix


def test_a_dict_args_value_is_one_error_not_one_per_union_arm() -> None:
    err = _error(lambda d: d["engine"]["args"].__setitem__("foo", {"a": 1}))
    assert not err.also and "engine.args.foo: none of the forms" in err.message, (err, err.also)


def test_a_refused_value_says_what_a_valid_one_looks_like() -> None:
    err = _error(lambda d: d["fabric"].__setitem__("mtu", "big"))
    assert "MTU required on every fabric netdev" in (err.fix or "") and "9000" in (err.fix or ""), err.fix


def test_a_spark_without_gpu_is_warned_about() -> None:
    """A GB10 profile without nodes[].gpu silently got no memory cap, admission, settle or guard."""
    import yaml

    from sparkctl.planning.build import build_plan

    data = yaml.safe_load((ROOT / "profiles" / "dual-spark.yaml").read_text())
    assert not any(
        "gpu: section" in w for w in build_plan(load_profile_text(yaml.safe_dump(data)), "tp2").warnings
    )
    for node in data["nodes"]:
        del node["gpu"]
    plan = build_plan(load_profile_text(yaml.safe_dump(data)), "tp2")
    said = [w for w in plan.warnings if "looks like a DGX Spark but has no gpu: section" in w]
    assert [w.split()[0] for w in said] == ["nodes.spark1", "nodes.spark2"], plan.warnings


def _edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


BOX = SHIPPED.decode()
# (what the file says, the command, the key path the refusal names, the line it is on): refusals
# of the plan, found after the profile loaded
PLAN_REFUSALS = [
    (_edit(BOX, "  container:\n", '  env:\n    HF_HUB_OFFLINE: "0"\n  container:\n'), ["plan"],
     "engine.env.HF_HUB_OFFLINE", '    HF_HUB_OFFLINE: "0"'),
    (_edit(BOX, "    attention-backend: flashinfer\n", "    attention-backend: flashinfer\n    port: 1\n"),
     ["plan"], "engine.args.port", "    port: 1"),
    (_edit(BOX, "      disable-radix-cache: true\n", "      disable-radix-cache: true\n      host: 0.0.0.0\n"),
     ["plan", "solo"], "modes.solo.args.host", "      host: 0.0.0.0"),
    (_edit(BOX, "  draft: {id: z-lab/Qwen3.6-27B-DFlash, revision: main}\n",
           "  draft: {id: z-lab/Qwen3.6-27B-DFlash, revision: main}\n  triton_cache: ~/.local\n"),
     ["plan"], "model.triton_cache", "  triton_cache: ~/.local"),
    (_edit(BOX, "    shm_size: 16g", "    shm_size: 16g\n    privileged: true"), ["export", "k8s", "tp2", "-o"],
     "engine.container.privileged", "    privileged: true"),
    (_edit(_edit(BOX, "modes:\n", "router:\n  command: [a, b]\nmodes:\n"), "host: 127.0.0.1",
           "host: 0.0.0.0\n  api_key: {env: SPARKCTL_API_KEY}"), ["plan", "dp2"], "router.command",
     "  command: [a, b]"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "argv", "key", "at"), PLAN_REFUSALS, ids=[c[2] for c in PLAN_REFUSALS])
def test_a_refusal_of_the_plan_names_the_file_and_line_of_its_key(
    tmp_path: Path, text: str, argv: list[str], key: str, at: str
) -> None:
    """They named the key path only ("error engine.env.HF_HUB_OFFLINE: ..."): the loader's own
    errors have file:line, these were found after it and had none."""
    path = tmp_path / "p.yaml"
    path.write_text(text)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith(at))
    argv = [*argv, str(tmp_path / "k8s")] if argv[-1] == "-o" else argv
    env = {"COLUMNS": "400", "SPARKCTL_API_KEY": "k", "SPARKCTL_PROFILE": ""}
    res = CliRunner().invoke(app, ["-p", str(path), *argv], env=env)
    assert res.exit_code == ExitCode.USAGE, res.output
    said = res.output.splitlines()
    assert said[0].startswith(f"error {path}:{line}: {key}: "), res.output
    assert said[1].startswith("  fix: "), res.output


def test_place_in_profile_leaves_errors_that_name_no_key_of_the_file(tmp_path: Path) -> None:
    from sparkctl.profile.load import place_in_profile

    path = tmp_path / "p.yaml"
    path.write_bytes(SHIPPED)
    errors = [ProfileError("unknown mode 'x'"), ProfileError("engine.nope: no such key"),
              ProfileError("engine.port: taken")]  # fmt: skip
    place_in_profile(errors[0], path)
    place_in_profile(errors[1], path)
    place_in_profile(errors[2], path)
    assert [e.message for e in errors] == ["unknown mode 'x'", "engine.nope: no such key",
                                           f"{path}:20: engine.port: taken"]  # fmt: skip


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ("port: 30000", "port: 1" + "0" * 5000, "a number of 5001 digits"),  # was a ValueError traceback
        ("gpus: 2", "gpus: 1" + "0" * 30, "a number of 31 digits"),  # was accepted as a GPU count
        ("mem-fraction-static: 0.92", "mem-fraction-static: .nan", ".nan is not a finite number"),
        ("mem-fraction-static: 0.92", "mem-fraction-static: .inf", ".inf is not a finite number"),
        ("mem-fraction-static: 0.92", "mem-fraction-static: 1.0e+999", "1.0e+999 is not a finite number"),
    ],
    ids=["5001-digits", "31-digits", "nan", "inf", "1e999"],
)
def test_numbers_that_fit_no_key_are_refused_at_their_line(
    tmp_path: Path, old: str, new: str, said: str
) -> None:
    """.nan passed `plan --check` (the launch check reads it as no value) and reached the engine."""
    text = _edit(BOX, old, new)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if new[:20] in ln)
    err = refused(text, tmp_path)
    assert err.message.startswith(f"{tmp_path / 'p.yaml'}:{line}: {said}"), err.message


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [("port: 30000", "port: true", "engine.port"), ("tp: 2", "tp: on", "modes.tp2.tp"),
     ("gpus: 2", "gpus: yes", "nodes[0].gpus")],
)  # fmt: skip
def test_a_bool_is_not_a_port_or_a_count(tmp_path: Path, old: str, new: str, key: str) -> None:
    """`port: true` was port 1, `gpus: yes` one GPU: pydantic's lax ints take a bool."""
    err = refused(_edit(BOX, old, new), tmp_path)
    assert f": {key}: a yes/no value (YAML reads true, yes, on" in err.message, err.message


def test_a_quoted_number_is_still_a_port_or_a_count() -> None:
    prof = load_profile_text(_edit(_edit(BOX, "port: 30000", 'port: "30001"'), "gpus: 2", "gpus: '2'"))
    assert prof.engine.port == 30001 and prof.nodes[0].gpus == 2


def test_a_control_character_names_its_line_and_not_tabs(tmp_path: Path) -> None:
    """A NUL had no line and the fix `indent with spaces, never tabs` ('unacceptable' holds 'tab')."""
    err = refused(_edit(BOX, "cluster: twogpu", "cluster: two\x00gpu"), tmp_path)
    assert err.message.startswith(f"{tmp_path / 'p.yaml'}:7: invalid YAML: a control character (#x0000)")
    assert "tabs" not in (err.fix or "") and "cat -A" in (err.fix or ""), err.fix


def test_a_field_validator_names_its_key_once_and_the_fix_describes_it(tmp_path: Path) -> None:
    """It said `engine.served_model_name.served_model_name` and `correct ... describes every key`."""
    err = refused(_edit(BOX, "served_model_name: qwen3.6-27b", 'served_model_name: "q\\nx"'), tmp_path)
    assert ":21: engine.served_model_name: a line break" in err.message, err.message
    assert (err.fix or "").startswith("engine.served_model_name: Name clients use"), err.fix


def test_no_fix_shows_pydantic_s_undefined_default(tmp_path: Path) -> None:
    """A required key's fix said `default PydanticUndefined`."""
    err = refused(_edit(BOX, "cluster: twogpu", "cluster: 2024-01-01"), tmp_path)
    assert "Undefined" not in (err.fix or "") and "Cluster name" in (err.fix or ""), err.fix


@pytest.mark.parametrize("what", ["directory", "missing"])
def test_a_directory_or_a_missing_file_is_one_line_and_exit_2(tmp_path: Path, what: str) -> None:
    path = tmp_path / "given"
    if what == "directory":
        path.mkdir()
    res = CliRunner().invoke(app, ["profile", "check", "-p", str(path)], env={"COLUMNS": "300"})
    assert res.exit_code == ExitCode.USAGE and res.exception is None or isinstance(res.exception, SystemExit)
    first, fix = res.output.splitlines()
    assert first == (f"error {path} is a directory, not a profile file" if what == "directory"
                     else f"error profile not found: {path}"), res.output  # fmt: skip
    assert fix.startswith("  fix: "), res.output


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [("  solo:\n", "  2:\n", ":40: modes.2: key 2 is not a name"),
     ("cluster: twogpu", "cluster: twogpu\n1: 2", ":8: 1: key 1 is not a name")],
)  # fmt: skip
def test_a_key_yaml_reads_as_a_number_says_so(tmp_path: Path, old: str, new: str, said: str) -> None:
    """It said `Input should be a valid string` with the fix `correct modes[2]`."""
    err = refused(_edit(BOX, old, new), tmp_path)
    assert said in err.message and "quote it" in (err.fix or ""), (err.message, err.fix)


def test_a_refused_value_is_not_echoed_whole(tmp_path: Path) -> None:
    """A 200,000-character cluster name came back whole in the error line."""
    err = refused(_edit(BOX, "cluster: twogpu", "cluster: " + "a" * 200_000), tmp_path)
    assert len(err.message) < 300 and "(200002 characters)" in err.message, err.message[:300]


def test_a_file_too_large_to_be_a_profile_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """A 2 GB file given by mistake was read whole and parsed (minutes, gigabytes)."""
    path = tmp_path / "p.yaml"
    with path.open("wb") as fh:
        fh.truncate(17 << 20)  # sparse: 17 MB of nothing
    err = refused_at(path)
    assert err.message == f"{path}: 17 MB is not a profile (sparkctl reads at most 16 MB)", err.message


def test_an_unreadable_profile_has_a_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "p.yaml"
    path.write_bytes(SHIPPED)

    def denied(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", denied)
    err = refused_at(path)
    assert err.message == f"cannot read profile {path}: Permission denied" and "ls -l" in (err.fix or "")


def refused_at(path: Path) -> ProfileError:
    with pytest.raises(ProfileError) as exc:
        load_profile_file(path)
    assert exc.value.exit_code == ExitCode.USAGE and exc.value.fix
    return exc.value
