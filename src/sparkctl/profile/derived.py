"""Values read from the profile alone: a node's home and paths (`~` expanded per node), its HF
cache, the model name clients use, the image every rank runs, a mode's nodes. Planning, preflight,
ship and the lifecycle import them here (ship needs no plan: a re-ship stays light)."""

from __future__ import annotations

import getpass
import posixpath
import pwd
from pathlib import Path
from typing import TYPE_CHECKING

from sparkctl.errors import UsageError

if TYPE_CHECKING:
    from sparkctl.profile.schema import Node, Profile


def node_user(node: Node, profile: Profile) -> str:
    """The node's login user as the profile says (this process's user when it does not)."""
    return node.user or profile.ssh.user or getpass.getuser()


def node_home(node: Node, profile: Profile) -> str:
    """Home of the node's login user: /root or /home/<user> on a peer; on this machine the user's
    real home (the runner's only when the profile names no user or names the runner: `export k8s`
    and the plan must not change with who runs them)."""
    user = node_user(node, profile)
    if node.is_local:
        if user == getpass.getuser():
            return str(Path.home())
        try:
            return pwd.getpwnam(user).pw_dir  # a local account: its home, no network
        except KeyError:
            pass
    return "/root" if user == "root" else f"/home/{user}"


def hf_cache_for(profile: Profile, node_name: str) -> str:
    """The node's HF cache path (node override, else the model default), `~` expanded per node."""
    node = profile.node(node_name)
    return node_path(node.hf_cache or profile.model.hf_cache, node, profile)


def node_path(path: str, node: Node, profile: Profile) -> str:
    if path == "~" or path.startswith("~/"):
        path = node_home(node, profile) + path[1:]
    if not posixpath.isabs(path):
        raise UsageError(f"path '{path}' on node {node.name} must be absolute (or start with ~/)")
    return posixpath.normpath(path)


def served_model_name(profile: Profile) -> str:
    return profile.engine.served_model_name or profile.model.target.id.rsplit("/", 1)[-1]


def image_ref(profile: Profile) -> tuple[str, str]:
    """(the image every rank runs, where it comes from: "ref" or "recipe:<name>")."""
    if profile.image.ref:
        return profile.image.ref, "ref"
    return recipe_tag(profile.image.recipe or ""), f"recipe:{profile.image.recipe}"


def recipe_tag(recipe: str) -> str:
    """The tag `sparkctl image build RECIPE` gives its derivative by default (and a profile's
    `image.recipe` runs)."""
    return f"sparkctl/{recipe}:latest"


def check_mode(profile: Profile, mode_name: str) -> None:
    if mode_name not in profile.modes:
        import difflib

        near = difflib.get_close_matches(mode_name, list(profile.modes), n=1)
        raise UsageError(
            f"unknown mode '{mode_name}'",
            fix=(f"did you mean '{near[0]}'? " if near else "")
            + f"modes in this profile: {', '.join(profile.modes)}",
        )


def mode_nodes(profile: Profile, mode_name: str | None = None) -> list[str]:
    """The nodes of a mode (default: the default mode) in the profile's order, each once: the
    plan's rank order, without building the plan."""
    mode_name = mode_name or profile.default_mode()
    check_mode(profile, mode_name)
    return list(dict.fromkeys(profile.modes[mode_name].nodes))
