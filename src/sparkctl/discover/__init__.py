"""`sparkctl init`: discover the nodes, pick the shared fabric, propose modes, write a profile.

facts.py gathers one node with the probes of sparkctl.facts (no second copy of any probe or parser);
fabric.py and proposal.py are pure (facts -> choices -> Draft); render.py writes the commented
YAML; sshsetup.py does `--ssh-setup` (host key, key pair, key install with a typed password);
workflow.py is the whole flow (connect, discover, ask through the CLI's InitUi, propose).
"""

from sparkctl.discover.fabric import FabricOption, NodeNet, pick_fabric
from sparkctl.discover.facts import NodeDiscovery, gather
from sparkctl.discover.proposal import Answers, Draft, build_draft
from sparkctl.discover.render import render_profile

__all__ = [
    "Answers",
    "Draft",
    "FabricOption",
    "NodeDiscovery",
    "NodeNet",
    "build_draft",
    "gather",
    "pick_fabric",
    "render_profile",
]
