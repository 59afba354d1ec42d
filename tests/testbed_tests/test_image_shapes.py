"""`up` serves from each entrypoint shape of the images users pull (issue 46): the launcher as
ENTRYPOINT (vllm/vllm-openai), an entrypoint script that execs its arguments (NVIDIA's), none
(SGLang's). The rank's argv replaces the image's ENTRYPOINT and CMD, so it runs as planned."""

from __future__ import annotations

import json

import pytest

from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file
from tests.testbed.images import SHAPES, build_shape_image
from tests.testbed.profiles import seed_weights, write_lab_profile
from tests.testbed_tests.conftest import SOLO, cli, cluster_containers, standin_record

pytestmark = pytest.mark.testbed


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_up_serves_from_every_entrypoint_shape(lab, tmp_path, shape, record_property) -> None:
    tag = build_shape_image(lab.docker("spark1"), shape)
    seed_weights(lab, ["spark1"])
    path = write_lab_profile(lab, tmp_path / "p.yaml", image=tag, modes={"solo": dict(SOLO)})
    state = tmp_path / "state"
    spec = build_plan(load_profile_file(path), "solo").ranks[0]
    image = lab.docker("spark1").images.get(tag).attrs["Config"]
    try:
        pre = cli(state, path, "preflight", "--only", "ImagePresent", "--json")
        said = [f["message"] for f in json.loads(pre.stdout)["findings"] if f["check"] == "ImagePresent"]
        own = f"ENTRYPOINT {image['Entrypoint']}" if image.get("Entrypoint") else "(no ENTRYPOINT)"
        assert any(f"in place of the image's {own}" in m for m in said), said

        res = cli(state, path, "up", "--json")
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        assert out["health"]["ready"]
        # Where the seconds went, measured around the real steps (`up -v` prints the same).
        steps = {s["step"]: s for s in out["timeline"]}
        record_property(
            "figure",
            f"up from the {shape!r} image shape: {out['elapsed_s']:.2f}s; "
            + "; ".join(f"{s['step']} {s['seconds']:.2f}s" for s in out["timeline"]),
        )
        assert {"secrets", "checks", "admission", "create+start", "load", "readiness"} <= set(steps)
        assert steps["create+start"]["rank"] == 0 and steps["create+start"]["node"] == "spark1"
        # Each figure is rounded to the millisecond, so a sum of two may run 1 ms past the next start.
        created = steps["create+start"]["start_s"] + steps["create+start"]["seconds"]
        assert steps["load"]["start_s"] >= created - 0.002
        assert all(s["seconds"] <= out["elapsed_s"] for s in out["timeline"])
        c = lab.docker("spark1").containers.get(spec.container_name)
        assert [*c.attrs["Config"]["Entrypoint"], *c.attrs["Config"]["Cmd"]] == spec.argv
        # The engine saw exactly the plan's flags: no launcher twice, no image CMD appended.
        assert standin_record(lab, "spark1", spec.container_name)["argv"] == spec.argv[3:]
    finally:
        cli(state, path, "down")
    assert not any(cluster_containers(lab, load_profile_file(path).cluster).values())
