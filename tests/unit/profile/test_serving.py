"""profile/serving.py: one served model's parts; here a mode's `gpu_ids` (the other keys are
tested through the whole profile in test_schema.py)."""

from __future__ import annotations

import pytest

from sparkctl.errors import ProfileError
from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_text
from sparkctl.profile.topology import mode_layout

BOX = """cluster: c
nodes:
  - {name: box, address: local, gpus: 2}
image: {ref: 'img:1'}
model: {target: {id: org/m}}
modes:
  solo: {nodes: [box], gpu_ids: GPUS}
"""


def test_gpu_ids_put_a_mode_on_the_named_gpus() -> None:
    prof = load_profile_text(BOX.replace("GPUS", "[1]"))
    assert [s.gpu_ids for s in mode_layout(prof, prof.modes["solo"]).slots] == [(1,)]
    assert build_plan(prof, "solo").ranks[0].options.gpus == "1"


@pytest.mark.parametrize(
    ("gpus", "says"), [("[2]", "has 2 GPU(s) (ids 0-1) but gpu_ids names 2"), ("[1, 1]", "names a GPU twice")]
)
def test_gpu_ids_a_node_lacks_are_refused_at_their_key(gpus: str, says: str) -> None:
    with pytest.raises(ProfileError) as err:
        load_profile_text(BOX.replace("GPUS", gpus), "p.yaml")
    assert "modes.solo.gpu_ids" in err.value.message and says in err.value.message
    assert "[gpu-ids]" in err.value.message


KEYED = BOX.replace("GPUS", "[0]") + "engine: ENGINE\n"


@pytest.mark.parametrize(
    ("engine", "says"),
    [
        ("{api_keys: {alice: {env: A}}}", "set api_key too"),
        ("{api_key: {env: K}, api_keys: {Alice: {env: A}}}", "'Alice' is not a key name"),
        ("{api_key: {env: K}, api_keys: {sparkctl: {env: A}}}", "'sparkctl' is not a key name"),
        ("{api_key: {env: K}, gateway: false, api_keys: {alice: {env: A}}}", "set gateway: true"),
        ("{api_key: {env: K}, api_keys: {alice: {env: A, per_minute: 0}}}", "per_minute"),
        ("{api_key: {env: K}, api_keys: {alice: {env: A, file: /k}}}", "exactly one of env or file"),
    ],
)
def test_named_keys_that_cannot_work_are_refused_with_the_reason(engine: str, says: str) -> None:
    with pytest.raises(ProfileError) as err:
        load_profile_text(KEYED.replace("ENGINE", engine))
    assert says in str(err.value) and "api_keys" in str(err.value)


def test_named_keys_load_beside_the_engines_own() -> None:
    prof = load_profile_text(
        KEYED.replace(
            "ENGINE", "{api_key: {env: K}, api_keys: {alice: {env: A, per_minute: 60}, ci: {file: /k}}}"
        )
    )
    assert list(prof.engine.api_keys) == ["alice", "ci"] and prof.engine.api_keys["alice"].per_minute == 60
    gate = build_plan(prof, "solo").ranks[0].gateway
    assert gate is not None and [(k.name, k.per_minute) for k in gate.named] == [("alice", 60), ("ci", None)]
    assert gate.named[1].ref.file == "/k" and gate.named[1].ref.node == "box"
