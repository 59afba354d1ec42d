"""Runs ON a node (python3 stdlib only), part of the node program: the routes the filtering front
(front.py) keeps on the node, and the only fields of theirs it lets out.

A private route is matched on its path as any server could read it (see normal_path). A GET of
one the router reads a worker's served name from is answered with the engine's listed fields
only, scalar values only, so its keys (`api_key`, `admin_api_key`) and every other setting stay
on the node; everything else of a private route is refused.
"""

import json
import posixpath
import re


def normal_path(target):
    """The request-target's path as a server could route it, in one canonical form (see above)."""
    from urllib.parse import unquote, urlsplit

    if not target.startswith("/"):
        target = urlsplit(target).path if "://" in target else "/" + target  # absolute-form
    path = target.split("?", 1)[0].split("#", 1)[0]
    for _ in range(16):
        decoded = unquote(path)
        if decoded == path:
            break
        path = decoded
    path = re.sub(r"/+", "/", "/" + path.replace("\\", "/"))
    path = "/".join(part.split(";", 1)[0] for part in path.split("/"))
    path = posixpath.normpath(path).lower().strip()
    return "/" + path.strip("/")


def is_private(target, routes):
    """True when the request-target reaches one of `routes` (normalised), under any prefix."""
    path = normal_path(target)
    for route in routes:
        r = normal_path(route)
        if path == r or path.startswith(r + "/") or path.endswith(r):
            return True
    return False


def public_fields(body, fields):
    """A private route's JSON answer cut to `fields` with scalar values (bytes), or None when the
    answer is not a JSON object: nothing else of it, keys included, leaves the node."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    scalar = (str, int, float, bool, type(None))
    return json.dumps({k: data[k] for k in fields if k in data and isinstance(data[k], scalar)}).encode()
