"""Run a short command inside the serving image on a node: SGLang's exact parser, nothing local.

The container gets no network and no GPU; it is removed whatever happens.
"""

from __future__ import annotations

from sparkctl.connectors.base import Connector
from sparkctl.launch.flags import RunInImage

TIMEOUT_S = 180


def image_runner(conn: Connector, image: str) -> RunInImage:
    def run(argv: list[str]) -> tuple[int, str, str]:
        client = conn.docker()
        container = client.containers.create(
            image, entrypoint=argv[:1], command=argv[1:], network_disabled=True,
            environment={"CUDA_VISIBLE_DEVICES": ""}, labels={"sparkctl.purpose": "flag-check"},
        )  # fmt: skip
        try:
            container.start()
            status = container.wait(timeout=TIMEOUT_S)
            out = container.logs(stdout=True, stderr=False).decode(errors="replace")
            err = container.logs(stdout=False, stderr=True).decode(errors="replace")
            return int(status.get("StatusCode", 1)), out, err
        finally:
            container.remove(force=True)

    return run
