"""Who the node user is on a node: the ids a rank's engine runs as with engine.container.user: node."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector

# A connection is one user on one node for its whole life: read their ids once per connection, not
# once per rank start (an SSH round trip each).
_NODE_IDS: weakref.WeakKeyDictionary[Connector, str] = weakref.WeakKeyDictionary()


def node_uid_gid(conn: Connector) -> str:
    """`UID:GID` of the node user (who the engine runs as with engine.container.user: node)."""
    known = _NODE_IDS.get(conn)
    if known is None:
        res = conn.run(["sh", "-c", 'printf "%s:%s" "$(id -u)" "$(id -g)"'], timeout=30)
        res.check("reading the node user's uid and gid", fix="the node needs `id` (coreutils) on PATH")
        known = _NODE_IDS[conn] = res.stdout.strip()
    return known
