"""Cluster profile: schema (pydantic) and loading (YAML with line-numbered errors)."""

from sparkctl.profile.load import find_profile, load_profile_file, load_profile_text
from sparkctl.profile.schema import Mode, Node, Profile

__all__ = ["Mode", "Node", "Profile", "find_profile", "load_profile_file", "load_profile_text"]
