"""Run a short command inside the serving image on a node: the engine's own parser, nothing local.

The container gets no network and no GPU and is removed whatever happens. The wait is short
(`timeout_s`, settable: `--parser-timeout`), and a failure says what really happened: the image
is missing on the node, the command timed out, or the engine could not be reached.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sparkctl.connectors.base import Connector

DEFAULT_TIMEOUT_S = 30.0
# argv -> (exit code, stdout, stderr) of that command run in the serving image
RunInImage = Callable[[list[str]], tuple[int, str, str]]


class InImageError(RuntimeError):
    """The in-image command did not produce an answer; the message is the real cause."""


def image_runner(
    conn: Connector,
    image: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    node: str = "",
    progress: Callable[[str], None] | None = None,
    what: str = "the engine's parser",
) -> RunInImage:
    say = progress or (lambda _msg: None)
    where = f" on {node}" if node else ""

    def run(argv: list[str]) -> tuple[int, str, str]:
        import docker.errors
        import requests.exceptions

        say(f"checking flags with {what} in {image}{where} (timeout {timeout_s:g} s)")
        start = time.monotonic()
        try:
            client = conn.docker()
            container = client.containers.create(
                image,
                entrypoint=argv[:1],
                command=argv[1:],
                network_disabled=True,
                environment={"CUDA_VISIBLE_DEVICES": ""},
                labels={"sparkctl.purpose": "flag-check"},
            )
        except docker.errors.ImageNotFound:
            raise InImageError(
                f"image {image} is not present{where} (`sparkctl ship --image` or pull it)"
            ) from None
        try:
            container.start()
            try:
                status = container.wait(timeout=timeout_s)
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError, TimeoutError):
                raise InImageError(
                    f"timed out after {timeout_s:g} s: `{argv[0]}` in {image}{where} did not "
                    "return (raise --parser-timeout if the image is slow to import its engine)"
                ) from None
            out = container.logs(stdout=True, stderr=False).decode(errors="replace")
            err = container.logs(stdout=False, stderr=True).decode(errors="replace")
            say(f"parser in the image answered in {time.monotonic() - start:.1f} s")
            return int(status.get("StatusCode", 1)), out, err
        finally:
            container.remove(force=True)

    return run
