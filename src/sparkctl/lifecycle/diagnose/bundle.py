"""The bundle: named text members and a manifest, masked, written as one .tar.gz through a temp
name and a rename (a reader never sees half a bundle; an interrupted run leaves no file)."""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from sparkctl.lifecycle.diagnose.mask import Masker

MANIFEST = "manifest.json"


@dataclass
class Bundle:
    """Members by path, each with what it is; `errors` says what could not be gathered, and why."""

    root: str
    masker: Masker
    members: dict[str, str] = field(default_factory=dict)
    sections: dict[str, dict] = field(default_factory=dict)
    nodes: dict[str, dict] = field(default_factory=dict)

    def add(self, path: str, text: str, what: str, **info: object) -> None:
        self.members[path] = self.masker.text(text)
        self.sections[path] = {"what": what, **info}

    def add_json(self, path: str, data: object, what: str, **info: object) -> None:
        self.add(path, json.dumps(data, indent=2, default=str) + "\n", what, **info)

    def failed(self, path: str, what: str, why: str) -> None:
        self.sections[path] = {"what": what, "error": self.masker.text(why)}

    def manifest(self, **head: object) -> dict:
        return {
            "sparkctl_diagnose": 1,
            **head,
            "nodes": self.nodes,
            "unreachable": sorted(n for n, d in self.nodes.items() if not d.get("reachable")),
            "members": self.sections,
        }

    def write(self, path: Path, **head: object) -> Path:
        manifest = json.dumps(self.manifest(**head), indent=2, default=str) + "\n"
        members = {MANIFEST: self.masker.text(manifest), **self.members}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as fh, tarfile.open(fileobj=fh, mode="w:gz") as tar:
                now = time.time()
                for name, text in members.items():
                    data = text.encode()
                    info = tarfile.TarInfo(f"{self.root}/{name}")
                    info.size, info.mtime, info.mode = len(data), now, 0o600
                    tar.addfile(info, io.BytesIO(data))
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return path
