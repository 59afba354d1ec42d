"""What the filtering front lets out of a private route (node/front_routes.py); the routes' path
matching is tested with the front itself (test_front.py)."""

from __future__ import annotations

import json

from sparkctl.node.front_routes import public_fields

FIELDS = ("served_model_name", "model_path")


def test_only_the_listed_scalar_fields_leave() -> None:
    body = json.dumps(
        {
            "served_model_name": "m",
            "model_path": {"k": "sk-x"},  # listed, but not a scalar
            "api_key": "sk-x",
            "admin_api_key": "sk-y",
        }
    )
    assert json.loads(public_fields(body.encode(), FIELDS)) == {"served_model_name": "m"}


def test_an_answer_that_is_not_a_json_object_lets_nothing_out() -> None:
    assert public_fields(b"api_key=sk-x", FIELDS) is None
    assert public_fields(b'["sk-x"]', FIELDS) is None
    assert json.loads(public_fields(b"{}", FIELDS)) == {}
