"""Security defaults, unit level: SSH words, the login-shell-proof transport, container options,
secret delivery, API binding and the Security preflight findings (docs/security.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sparkctl.connectors.ssh import remote_command
from sparkctl.errors import ProfileError
from sparkctl.facts.net import ssh_probe
from sparkctl.findings import Severity
from sparkctl.planning.build import build_plan
from sparkctl.preflight.checks.security import (
    check_api_exposure,
    check_privileged,
    check_remote_code,
    parse_modes,
)
from sparkctl.profile import load_profile_text
from sparkctl.secrets import SecretFile, SecretRef, redact, render_files

ROOT = Path(__file__).resolve().parents[4]
DUAL = (ROOT / "profiles" / "dual-spark.yaml").read_text()
TWO_GPU = (ROOT / "profiles" / "two-gpu-box.yaml").read_text()


@pytest.fixture(autouse=True)
def home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/spark")


def load(text: str):
    return load_profile_text(text, "p.yaml")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("user", "-oProxyCommand=touch /tmp/x"),
        ("user", "spark bad"),
        ("user", "sp\x07ark"),
        ("address", "-oProxyCommand=x"),
        ("address", "spark2.local\n"),
        ("address", "a\tb"),
    ],
)
def test_ssh_words_that_could_be_options_are_refused(field: str, value: str) -> None:
    old = (
        "    address: spark2.local"
        if field == "address"
        else "    user: spark\n    gpus: 1\n    gpu: {name: NVIDIA GB10"
    )
    new = (
        f"    address: {json.dumps(value)}"
        if field == "address"
        else old.replace("user: spark", f"user: {json.dumps(value)}")
    )
    with pytest.raises(ProfileError) as err:
        load(DUAL.replace(old, new, 1))
    assert "nodes[" in err.value.message and f"].{field}" in err.value.message
    assert "must not start with '-'" in err.value.message


def test_ssh_default_user_is_validated_too() -> None:
    with pytest.raises(ProfileError, match="ssh.user"):
        load(DUAL.replace("  host_key_policy: strict", "  host_key_policy: strict\n  user: -lroot", 1))


def test_system_ssh_argv_ends_options_before_the_destination() -> None:
    argv = ssh_probe("spark2", user="spark").argv
    assert argv[argv.index("--") + 1 :] == ("spark@spark2", "true")


EVIL = [
    "a b",
    "$(touch /tmp/sparkctl-unit-pwned)",
    "\\'';touch /tmp/sparkctl-unit-pwned;#",
    "",
    "x\n",
    "-n",
    "(touch /tmp/sparkctl-unit-pwned)",
    "{a,b}",
    "~",
    "ünï",
    "'\"",
    "%self",
]


@pytest.mark.parametrize("shell", ["sh", "bash", "dash", "fish"])
def test_remote_command_is_parsed_the_same_by_every_login_shell(shell: str) -> None:
    path = shutil.which(shell)
    if path is None:
        pytest.fail(f"{shell} is not installed (scripts/install-deps installs it)")
    out = subprocess.run(
        [path, "-c", remote_command(["printf", "%s|", *EVIL])], capture_output=True, text=True
    )
    assert out.stdout == "".join(f"{a}|" for a in EVIL), out.stderr
    assert not Path("/tmp/sparkctl-unit-pwned").exists()


def test_remote_command_carries_only_inert_words() -> None:
    cmd = remote_command(["echo", "$(x)", "a;b"])
    script = cmd.split("'")[1]
    assert "\\" not in script and cmd.startswith("/bin/sh -c '")
    assert cmd.split("' ", 1)[1] == "sparkctl recho bJCh4KQ== bYTti"


def test_rdma_preset_only_for_multi_node_modes_and_never_privileged() -> None:
    prof = load(DUAL)
    tp2 = build_plan(prof, "tp2").ranks[0].options
    solo = build_plan(prof, "solo").ranks[0].options
    assert (tp2.rdma_devices_dir, tp2.cap_add, tp2.ulimits) == (
        "/dev/infiniband",
        ["IPC_LOCK"],
        {"memlock": -1},
    )
    assert (solo.rdma_devices_dir, solo.cap_add, solo.ulimits) == (None, [], {})
    assert not tp2.privileged and not solo.privileged
    tcp = build_plan(
        load(
            DUAL.replace("    preset: rdma", "    preset: auto").replace("transport: roce", "transport: tcp")
        ),
        "tp2",
    )
    assert tcp.ranks[0].options.rdma_devices_dir is None  # auto: RoCE only
    extra = load(
        DUAL.replace(
            "    preset: rdma", "    preset: rdma\n    cap_add: [SYS_NICE]\n    ulimits: {nofile: 1024}"
        )
    )
    opts = build_plan(extra, "tp2").ranks[0].options
    assert opts.cap_add == ["IPC_LOCK", "SYS_NICE"] and opts.ulimits == {"memlock": -1, "nofile": 1024}


def test_ipc_private_with_shm_unless_ranks_share_a_machine() -> None:
    opts = build_plan(load(TWO_GPU), "tp2").ranks[0].options  # one container holds both GPUs
    assert (opts.ipc_mode, opts.shm_size) == ("private", "16g")
    shared = load(DUAL.replace("address: spark2.local", "address: local").replace("    shm_size: 32g\n", ""))
    opts = build_plan(shared, "tp2").ranks[0].options
    assert (opts.ipc_mode, opts.shm_size) == ("host", None)  # two containers on one box share /dev/shm
    with pytest.raises(ProfileError, match="ignores shm_size under ipc: host"):
        load(DUAL.replace("    shm_size: 32g", "    shm_size: 32g\n    ipc: host"))


def test_privileged_is_an_opt_in_that_plan_and_preflight_warn_about() -> None:
    prof = load(DUAL.replace("    preset: rdma", "    preset: rdma\n    privileged: true"))
    plan = build_plan(prof, "tp2")
    assert plan.ranks[0].options.privileged and any("privileged" in w for w in plan.warnings)
    finding = check_privileged(prof)
    assert finding is not None and finding.severity is Severity.WARN
    assert check_privileged(load(DUAL)) is None


def test_binding_every_interface_needs_a_key_or_expose_public() -> None:
    keyless = DUAL.replace("  api_key: {env: SPARKCTL_API_KEY}", "  api_key:")
    f = check_api_exposure(load(keyless))
    assert f.severity is Severity.ERROR and "engine.api_key" in (f.fix or "")
    assert (
        check_api_exposure(load(keyless.replace("  port: 8888", "  port: 8888\n  expose: public"))).severity
        is Severity.WARN
    )
    assert check_api_exposure(load(DUAL)).severity is Severity.OK
    local = load(keyless.replace("  host: 0.0.0.0", "  host: 127.0.0.1"))
    assert check_api_exposure(local).severity is Severity.OK


def test_default_host_is_each_nodes_own_address() -> None:
    prof = load(DUAL.replace("  host: 0.0.0.0", "  host:").replace("address: local", "address: spark1.local"))
    plan = build_plan(prof, "tp2")
    hosts = [r.argv[r.argv.index("--host") + 1] for r in plan.ranks]
    assert hosts == ["spark1.local", "spark2.local"] and plan.endpoint.host == "spark1.local"
    pinned = build_plan(load(DUAL.replace("  host: 0.0.0.0", "  host: 10.1.2.3")), "tp2")
    hosts = [r.argv[r.argv.index("--host") + 1] for r in pinned.ranks]
    assert (
        hosts == ["10.1.2.3", "spark2.local"] and pinned.endpoint.host == "10.1.2.3"
    )  # rank 1 can't bind rank 0's IP


def test_remote_code_is_opt_in_and_unpinned_revisions_warn() -> None:
    prof = load(DUAL)
    assert "--trust-remote-code" not in build_plan(prof, "tp2").ranks[0].argv
    checks = {f.check: f for f in check_remote_code(prof)}
    assert set(checks) == {"UnpinnedRevision"} and "model.target" in checks["UnpinnedRevision"].message
    opted = load(
        DUAL.replace("  port: 8888", "  port: 8888\n  trust_remote_code: true").replace(
            "revision: main", "revision: 0123abc"
        )
    )
    assert "--trust-remote-code" in build_plan(opted, "tp2").ranks[0].argv
    assert [f.check for f in check_remote_code(opted)] == ["RemoteCode"]
    # flags the engine manages are refused when the plan is built (the profile imports no engine)
    remote = load(
        DUAL.replace(
            "    attention-backend: flashinfer",
            "    attention-backend: flashinfer\n    trust-remote-code: true",
        )
    )
    with pytest.raises(ProfileError, match="engine.trust_remote_code"):
        build_plan(remote, "tp2")
    keyed = load(
        DUAL.replace(
            "    attention-backend: flashinfer", "    attention-backend: flashinfer\n    api-key: abc"
        )
    )
    with pytest.raises(ProfileError, match="engine.api_key"):
        build_plan(keyed, "tp2")


def test_secret_files_render_as_sglang_config_and_raw_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K", 'we"ird\\key')
    monkeypatch.setenv("T", "hf_tok")
    files = [
        SecretFile("/run/secrets/c.yaml", SecretRef("api-key", env="K"), "api-key"),
        SecretFile("/run/secrets/HF_TOKEN", SecretRef("HF_TOKEN", env="T")),
        SecretFile("/run/secrets/X", SecretRef("X", file="/x", node="n"), bind=True),
    ]
    out = render_files(files, None)
    assert out == {"/run/secrets/c.yaml": b'api-key: "we\\"ird\\\\key"\n', "/run/secrets/HF_TOKEN": b"hf_tok"}
    import yaml

    assert yaml.safe_load(out["/run/secrets/c.yaml"]) == {"api-key": 'we"ird\\key'}
    assert redact('key=we"ird\\key!', ['we"ird\\key']) == "key=***!"


def test_secret_file_modes_need_0400() -> None:
    found = parse_modes("spark2", "644 /home/spark/tok\n400 /home/spark/ok\nmissing /home/spark/gone\n")
    assert [(f.severity, f.node) for f in found] == [(Severity.ERROR, "spark2")] * 2
    assert found[0].fix == "chmod 0400 /home/spark/tok  (on spark2)" and "missing" in found[1].message
    assert parse_modes("spark2", "400 /a\n600 /b\n") == []


def test_curl_hint_names_the_key_source_never_the_value(monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkctl.commands.up import curl_example

    monkeypatch.setenv("SPARKCTL_API_KEY", "sk-never-printed")
    hint = curl_example(build_plan(load(DUAL), "tp2"))
    assert hint.endswith('-H "Authorization: Bearer $SPARKCTL_API_KEY"') and "sk-never-printed" not in hint
    assert "Authorization" not in curl_example(build_plan(load(TWO_GPU), "tp2"))


def test_profile_secret_resolves_here_for_verify(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkctl.verify.client import profile_api_key

    monkeypatch.setenv("SPARKCTL_API_KEY", "sk-here")
    assert profile_api_key(load(DUAL)) == "sk-here"
    key = tmp_path / "key"
    key.write_text("sk-file\n")
    prof = load(DUAL.replace("{env: SPARKCTL_API_KEY}", "{file: " + str(key) + "}"))
    assert profile_api_key(prof) == "sk-file"
    assert profile_api_key(load(DUAL.replace("{env: SPARKCTL_API_KEY}", "{file: /nonexistent}"))) is None


def test_security_is_a_registered_check_in_ups_quick_subset() -> None:
    from sparkctl.preflight.base import Ctx, NodeFacts
    from sparkctl.preflight.registry import ALIASES, FAST_CHECKS, REGISTRY, validate_names

    assert "Security" in FAST_CHECKS and ALIASES["ApiExposure"] == ALIASES["SecretFileMode"] == "Security"
    check = REGISTRY["Security"]
    keyless = load(DUAL.replace("  api_key: {env: SPARKCTL_API_KEY}", "  api_key:"))
    plan = build_plan(keyless, "tp2")
    only = frozenset(validate_names({"apiexposure"}, "--only"))  # one finding of the group, by name
    ctx = Ctx(keyless, plan, only, "/sys", REGISTRY)
    found = check.judge(ctx, {n: NodeFacts(n) for n in plan.nodes})
    assert check.selected(ctx) and [(f.check, f.severity) for f in found] == [("ApiExposure", Severity.ERROR)]
    assert found[0].data["group"] == "Security"
