"""The node user's ids (runtime/node_user.py): read once per connection."""

from __future__ import annotations

import os

from sparkctl.connectors.local import LocalConnector
from sparkctl.runtime.node_user import node_uid_gid


def test_the_node_users_ids_are_read_once_per_connection() -> None:
    class Counting(LocalConnector):
        calls = 0

        def run(self, argv, **kw):  # type: ignore[no-untyped-def]
            Counting.calls += 1
            return super().run(argv, **kw)

    conn, other = Counting("spark1"), Counting("spark2")
    want = f"{os.getuid()}:{os.getgid()}"
    assert [node_uid_gid(conn) for _ in range(3)] == [want] * 3 and Counting.calls == 1
    assert node_uid_gid(other) == want and Counting.calls == 2  # another connection asks again
