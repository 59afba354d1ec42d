"""Security defaults, unit level: SSH words, the login-shell-proof transport, container options,
secret delivery, API binding and the Security preflight findings (docs/security.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

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


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ("hf_cache: ~/.cache/huggingface", "hf_cache: relative/cache", "model.hf_cache"),
        ("hf_cache: ~/.cache/huggingface", 'hf_cache: "/srv/hf\\n/x\\u0000"', "model.hf_cache"),
        ("hf_cache: ~/.cache/huggingface", "hf_cache: /srv/../etc", "model.hf_cache"),
        ("hf_cache: ~/.cache/huggingface", "hf_cache: -oProxyCommand=x", "model.hf_cache"),
        ("id: Qwen/Qwen3.6-27B-NVFP4", 'id: "Qwen/x\'; touch /tmp/p; #"', "model.target.id"),
        ("id: Qwen/Qwen3.6-27B-NVFP4", "id: ../../etc", "model.target.id"),
        ("id: Qwen/Qwen3.6-27B-NVFP4", "id: a--b/c", "model.target.id"),
        ("revision: 5b0d4b5", "revision: \"main\\\\'';touch /tmp/p;#\"", "model.draft.revision"),
        ("revision: 5b0d4b5", "revision: ../../x", "model.draft.revision"),
        ("revision: 5b0d4b5", "revision: -x", "model.draft.revision"),
    ],
)
def test_paths_model_ids_and_revisions_sent_to_nodes_are_validated(old: str, new: str, where: str) -> None:
    assert old in DUAL
    with pytest.raises(ProfileError) as err:
        load(DUAL.replace(old, new, 1))
    assert where in err.value.message


def test_hostile_but_valid_cache_paths_load() -> None:
    """Quotes, `;`, `$` and spaces in a path are fine: no shell parses a path (the hop is encoded)."""
    odd = "/tmp/hf \\'\"; touch x; #$(y)"
    prof = load(DUAL.replace("hf_cache: ~/.cache/huggingface", f"hf_cache: {json.dumps(odd)}", 1))
    assert prof.model.hf_cache == odd


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("trust-remote: true", "the engine reads it as --trust-remote-code"),  # argparse abbreviation
        ('api-ke: ""', "the engine reads it as --api-key"),
        ("admin-api: x", "the engine reads it as --admin-api-key"),
        ("log-level: [info, --enable-metrics]", "starting with '-'"),
        ("log-level: --enable-metrics", "starting with '-'"),
    ],
)
def test_managed_flag_guard_resolves_prefixes_and_refuses_flag_values(args: str, message: str) -> None:
    text = DUAL.replace("    attention-backend: flashinfer", f"    attention-backend: flashinfer\n    {args}")
    with pytest.raises(ProfileError) as err:
        build_plan(load(text), "tp2")  # managed flags are the engine's: checked when the plan is built
    assert message in err.value.message


def test_flag_values_that_are_negative_numbers_and_full_flags_pass() -> None:
    prof = load(
        DUAL.replace(
            "    attention-backend: flashinfer",
            "    attention-backend: flashinfer\n    random-seed: '-1'\n    log-level: info\n    model-impl: sglang",
        )
    )
    assert prof.engine.args["random-seed"] == "-1" and prof.engine.args["model-impl"] == "sglang"


def test_an_admin_key_is_flagged_in_the_plan() -> None:
    """SGLang 0.5.23's /server_info (a NORMAL route) returns admin_api_key to api_key holders: with
    the gateway off (engine.gateway: false), `plan` says so."""
    text = DUAL.replace(
        "  api_key: {env: SPARKCTL_API_KEY}",
        "  api_key: {env: SPARKCTL_API_KEY}\n  admin_api_key: {env: A}",
        1,
    )
    assert not any("/server_info" in w for w in build_plan(load(text), "solo").warnings)  # the gateway
    off = text.replace(
        "  api_key: {env: SPARKCTL_API_KEY}", "  gateway: false\n  api_key: {env: SPARKCTL_API_KEY}"
    )
    warnings = build_plan(load(off), "solo").warnings
    assert any(
        "/server_info" in w and "admin_api_key" in w and "engine.gateway: false" in w for w in warnings
    )
    assert not any("/server_info" in w for w in build_plan(load(DUAL), "solo").warnings)


def test_admin_key_without_api_key_is_a_profile_error() -> None:
    text = DUAL.replace("  api_key: {env: SPARKCTL_API_KEY}", "  admin_api_key: {env: SPARKCTL_ADMIN_KEY}", 1)
    assert text != DUAL
    with pytest.raises(ProfileError) as err:
        load(text)
    assert "admin_api_key: set api_key too" in err.value.message


@pytest.mark.parametrize("triton", ["~/.cache", "'~'", "/home", "/", "~/.cache/sparkctl"])
def test_no_read_write_mount_may_hold_the_nodes_own_code(triton: str) -> None:
    text = DUAL.replace("  triton_cache: ~/.triton", f"  triton_cache: {triton}", 1)
    with pytest.raises(ProfileError) as err:
        build_plan(load(text), "solo")
    assert "would let the serving container write /home/spark/.cache/sparkctl" in err.value.message


@pytest.mark.parametrize(
    "triton", ["~/.local", "~/.local/state/sparkctl/guard", "~/.config/x", "~/.ssh", "/home/spark/.bashrc.d"]
)
def test_no_read_write_mount_of_the_home_or_its_dot_directories(triton: str) -> None:
    text = DUAL.replace("  triton_cache: ~/.triton", f"  triton_cache: {triton}", 1)
    with pytest.raises(ProfileError) as err:
        build_plan(load(text), "solo")
    assert (
        "would let the serving container write the node user's home or a dot-directory" in err.value.message
    )
    assert err.value.fix and "~/.cache/huggingface" in err.value.fix


@pytest.mark.parametrize("triton", ["~/.triton", "~/.cache/triton", "~/triton", "/var/cache/triton"])
def test_caches_may_be_mounted_read_write(triton: str) -> None:
    text = DUAL.replace("  triton_cache: ~/.triton", f"  triton_cache: {triton}", 1)
    assert build_plan(load(text), "solo").ranks


@pytest.mark.parametrize("ref", ["--help", "-q", "img:-x", "a b", "x;touch /tmp/p", "IMG", "x@sha256:zz"])
def test_image_ref_follows_dockers_reference_grammar(ref: str) -> None:
    text = DUAL.replace("  ref: sglang-dflash:spark", f"  ref: {json.dumps(ref)}", 1)
    assert text != DUAL
    with pytest.raises(ProfileError) as err:
        load(text)
    assert "image.ref" in err.value.message and "Docker image reference" in err.value.message


@pytest.mark.parametrize(
    ("where", "warned"),
    [
        ("/dev", True),
        ("/dev/", True),
        ("/", True),
        ("/dev/dri", True),
        ("/dev/infiniband", False),
        ("/srv/lab/infiniband", False),
    ],
)
def test_a_device_dir_wider_than_rdma_is_warned(where: str, warned: bool) -> None:
    from sparkctl.preflight.checks.security import check_rdma_dir

    prof = load(DUAL.replace("    preset: rdma  ", f"    rdma_devices_dir: {where}\n    preset: rdma  ", 1))
    f = check_rdma_dir(prof)
    assert (f is not None) is warned
    if warned:
        assert f.severity is Severity.WARN and "every character device" in f.message
        assert any("rdma_devices_dir" in w for w in build_plan(prof, "tp2").warnings)


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


@pytest.mark.parametrize("shell", ["sh", "bash", "dash", "fish", "tcsh"])
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
        ["IPC_LOCK", "DAC_OVERRIDE"],  # DAC_OVERRIDE: the node user `spark` owns the mounted caches
        {"memlock": -1},
    )
    assert (solo.rdma_devices_dir, solo.cap_add, solo.ulimits) == (None, ["DAC_OVERRIDE"], {})
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
    assert opts.cap_add == ["IPC_LOCK", "DAC_OVERRIDE", "SYS_NICE"]
    assert opts.ulimits == {"memlock": -1, "nofile": 1024}


def test_containers_drop_every_capability_and_gain_no_privileges() -> None:
    """cap_drop ALL, then only what is needed: nothing for a root node user's solo rank, IPC_LOCK for
    the rdma preset, DAC_OVERRIDE when another user owns the mounted caches; no-new-privileges and
    a pids limit on every rank and on the router."""
    root = load(DUAL.replace("    user: spark", "    user: root"))
    solo = build_plan(root, "solo").ranks[0].options
    tp2 = build_plan(root, "tp2").ranks[0].options
    assert solo.cap_drop == ["ALL"] and solo.cap_add == [] and tp2.cap_add == ["IPC_LOCK"]
    for o in (solo, tp2):
        assert o.security_opt == ["no-new-privileges:true"] and o.pids_limit == 8192
    assert "cap_drop ALL" in solo.describe() and "no-new-privileges" in solo.describe()
    capped = load(DUAL.replace("    preset: rdma  ", "    pids_limit: 1024\n    preset: rdma  "))
    assert build_plan(capped, "tp2").ranks[0].options.pids_limit == 1024


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


@pytest.mark.parametrize("host", ["0", "::0", "0:0:0:0:0:0:0:0", "[::]", "0.0", "0x0", "000.0.0.0", ""])
def test_every_spelling_of_all_interfaces_needs_a_key(host: str) -> None:
    keyless = DUAL.replace("  api_key: {env: SPARKCTL_API_KEY}", "  api_key:")
    f = check_api_exposure(load(keyless.replace("  host: 0.0.0.0", f"  host: {json.dumps(host)}")))
    assert f.severity is Severity.ERROR and "binds every interface" in f.message


def test_a_keyless_api_on_a_lan_address_is_an_error_unless_public() -> None:
    """Not only 0.0.0.0: the default host (each node's own address) and any non-loopback address
    serve SGLang's admin-optional routes to the LAN when there is no key."""
    keyless = DUAL.replace("  api_key: {env: SPARKCTL_API_KEY}", "  api_key:")
    for host in ("192.168.1.10", "127.0.0.1"):  # 127.0.0.1: rank 0 only; spark2 binds its own address
        f = check_api_exposure(load(keyless.replace("  host: 0.0.0.0", f"  host: {host}")))
        assert (
            f.severity is Severity.ERROR and "spark2.local" in f.message and "expose: public" in (f.fix or "")
        )
    public = keyless.replace("  host: 0.0.0.0", "  host: 192.168.1.10\n  expose: public")
    assert check_api_exposure(load(public)).severity is Severity.WARN
    solo = (ROOT / "profiles" / "solo-spark.yaml").read_text()
    assert "  api_key:" not in solo and "  host: 127.0.0.1" in solo
    alone = load(solo.replace("  host: 127.0.0.1", "  host: '127.1'"))  # inet_aton's short loopback
    assert check_api_exposure(alone).severity is Severity.OK  # one local node: every bind is loopback


def _served_host(r) -> str:
    """The address a rank's API listens on: its gateway's, else its engine's own --host."""
    return r.gateway.listen if r.gateway else r.argv[r.argv.index("--host") + 1]


def test_default_host_is_each_nodes_own_ip_resolved_on_the_node() -> None:
    from sparkctl.planning.model import PlanFacts

    prof = load(DUAL.replace("  host: 0.0.0.0", "  host:").replace("address: local", "address: spark1.local"))
    plan = build_plan(prof, "tp2")  # names: never bound as names; `up` resolves them on the nodes
    hosts = [_served_host(r) for r in plan.ranks]
    assert hosts == ["<IP of spark1.local>", "<IP of spark2.local>"] and len(plan.unresolved) == 2
    assert plan.endpoint.host == "spark1.local"  # this machine's client may use the name
    facts = PlanFacts(addresses={"spark1": ("10.0.0.1", "ssh"), "spark2": ("10.0.0.2", "ssh")})
    resolved = build_plan(prof, "tp2", facts)
    assert [_served_host(r) for r in resolved.ranks] == ["10.0.0.1", "10.0.0.2"]
    assert not resolved.unresolved
    pinned = build_plan(load(DUAL.replace("  host: 0.0.0.0", "  host: 10.1.2.3")), "tp2", facts)
    hosts = [_served_host(r) for r in pinned.ranks]
    assert (
        hosts == ["10.1.2.3", "10.0.0.2"] and pinned.endpoint.host == "10.1.2.3"
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


def test_masking_covers_escaped_forms_and_short_values() -> None:
    """What `logs`, the start-up watch and failure tails show: the value as SGLang's repr of its
    settings prints it (`\\'`, `\\\\`), JSON-escaped, and a short value where it stands alone."""
    key = "k'e\\y\"1"
    line = f"server_args=ServerArgs(api_key={key!r}, admin_api_key='ab', x={json.dumps(key)}) cab"
    out = redact(line, [key, "ab"])
    assert out == "server_args=ServerArgs(api_key='***', admin_api_key='***', x=\"***\") cab"


def test_secret_file_modes_need_0400() -> None:
    found = parse_modes("spark2", "644 /home/spark/tok\n400 /home/spark/ok\nmissing /home/spark/gone\n")
    assert [(f.severity, f.node) for f in found] == [(Severity.ERROR, "spark2")] * 2
    assert found[0].fix == "chmod 0400 /home/spark/tok  (on spark2)" and "missing" in found[1].message
    assert parse_modes("spark2", "400 /a\n600 /b\n") == []


def test_curl_hint_names_the_key_source_never_the_value(monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkctl.commands.up_output import curl_example

    monkeypatch.setenv("SPARKCTL_API_KEY", "sk-never-printed")
    hint = curl_example(build_plan(load(DUAL), "tp2"))
    assert hint.endswith('-H "Authorization: Bearer $SPARKCTL_API_KEY"') and "sk-never-printed" not in hint
    assert "Authorization" not in curl_example(build_plan(load(TWO_GPU), "tp2"))


def test_profile_secret_resolves_here_for_verify(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkctl.secrets import local_ref, resolve_known

    def profile_api_key(prof):  # what verify and bench send
        return resolve_known(local_ref("api-key", prof.engine.api_key))

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


def test_an_unset_env_secret_source_is_a_preflight_error_with_the_export_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sparkctl.preflight.checks.security import check_secret_envs

    plan = build_plan(load(DUAL), "dp2")  # ranks (HF_TOKEN), endpoint and router (api key)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("SPARKCTL_API_KEY", "sk-set")
    found = {f.message.split(" comes")[0]: f for f in check_secret_envs(plan)}
    bad = [f for f in found.values() if f.severity is Severity.ERROR]
    assert len(bad) == 1 and "$HF_TOKEN" in bad[0].message
    assert bad[0].fix.startswith("export HF_TOKEN=")
    monkeypatch.setenv("HF_TOKEN", "hf-set")
    assert {f.severity for f in check_secret_envs(plan)} == {Severity.OK}


def test_a_named_keys_unset_variable_is_a_preflight_error_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkctl.preflight.checks.security import check_secret_envs, secret_files

    doc = yaml.safe_load(DUAL)
    doc["engine"]["api_keys"] = {"alice": {"env": "ALICE_KEY"}, "ci": {"file": "/etc/sparkctl/ci-key"}}
    plan = build_plan(load_profile_text(yaml.safe_dump(doc), "p.yaml"), "dp2")
    monkeypatch.setenv("HF_TOKEN", "hf-set")
    monkeypatch.setenv("SPARKCTL_API_KEY", "sk-set")
    monkeypatch.delenv("ALICE_KEY", raising=False)
    bad = [f for f in check_secret_envs(plan) if f.severity is Severity.ERROR]
    assert len(bad) == 1 and "$ALICE_KEY" in bad[0].message and bad[0].fix.startswith("export ALICE_KEY=")
    # the router's node and every replica head hold the file key (their gateways read it)
    holders = {n for n, paths in secret_files(plan).items() if "/etc/sparkctl/ci-key" in paths}
    assert holders == {g.head_node for g in plan.groups} | {plan.router.node}
