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
