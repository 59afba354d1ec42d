"""The HTTP attack corpus against the real gateway (issue 38, docs/security.md "The gateway"): raw
requests over one socket each, so no client library normalises them first.

Every attack is (name, bytes). An attack fails when no answer on its connection is a 2xx for a
private target, no answer carries a canary (raw or base64), and the engine behind the gateway
received only allowlisted request targets (the stand-in engine records them).
"""

from __future__ import annotations

import base64
import re
import socket

PRIVATE = (
    "/server_info",
    "/get_server_info",
    "/get_model_info",
    "/model_info",
    "/engine_metrics",
    "/metrics",
    "/flush_cache",
    "/workers",
    "/generate",
)


def spellings(path: str) -> list[str]:
    """Ways to write `path` that a lax router or a normalising upstream may map back to it."""
    name = path.lstrip("/")
    head, _, tail = name.partition("_")
    enc1 = "".join(f"%{ord(c):02X}" for c in name)
    return [
        path,
        path.upper(),
        "/" + name.capitalize(),
        "/" + name.swapcase(),
        "//" + name,
        "///" + name,
        path + "/",
        path + "//",
        "/./" + name,
        "/v1/../" + name,
        "/v1/models/../../" + name,
        "/v1/chat/completions/../../" + name,
        "/v1/%2e%2e/" + name,
        "/v1/%2E%2E/" + name,
        "/v1/models/%2e%2e/%2e%2e/" + name,
        "/v1%2F..%2F" + name,
        "/v1%2f..%2f" + name,
        "%2F" + name,
        "/%2F" + name,
        "/v1%252F..%252F" + name,
        "/%252F" + name,
        "/" + enc1,
        f"/{head}%5F{tail}" if tail else "/" + name + "%00",
        f"/{head}%255F{tail}" if tail else "/" + name + "%2500",
        "/%" + f"{ord(name[0]):02x}" + name[1:],
        path + ";",
        path + ";a=b",
        "/v1/models;/../../" + name,
        "/" + name + ";jsessionid=1",
        path + "?",
        path + "?a=1",
        "/v1/models?/../" + name,
        path + "#",
        "/v1/models#/../" + name,
        path + "%00",
        path + "%20",
        path + ".",
        path + "/.",
        path + "/./",
        "/v1/models/" + name,
        "/v1/" + name,
        "/v1/models/..%2F..%2F" + name,
        "/v1/models/..;/../" + name,
        "\\" + name,
        "/v1\\..\\" + name,
        "http://upstream" + path,
        "http://127.0.0.1" + path,
        "https://x" + path,
        "//upstream" + path,
        "/\u2215" + name,  # division slash, a unicode look-alike
        "/\uff0f" + name,  # fullwidth solidus
        " " + path,
        path + " HTTP/1.1\r\nX: y",
    ]


def _head(method: str, target: str, key: str | None, extra: str = "", body: bytes = b"") -> bytes:
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    length = f"Content-Length: {len(body)}\r\n" if body or method == "POST" else ""
    return (
        f"{method} {target} HTTP/1.1\r\nHost: gw\r\n{auth}{length}{extra}\r\n".encode(
            "utf-8", "surrogateescape"
        )
        + body
    )


def path_attacks(key: str) -> list[tuple[str, bytes]]:
    out = []
    for path in PRIVATE:
        for target in spellings(path):
            for method in ("GET", "POST"):
                for k in (key, None):
                    body = b"{}" if method == "POST" else b""
                    out.append((f"{method} {target!r} key={bool(k)}", _head(method, target, k, body=body)))
    return out


def smuggled(key: str, private: str = "/server_info") -> bytes:
    return f"GET {private} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n\r\n".encode()


def framing_attacks(key: str) -> list[tuple[str, bytes]]:
    """Hop-by-hop, CL/TE, duplicate lengths, pipelining, malformed framing: each carries a private
    request where a confused parser would take it as the next request."""
    inner = smuggled(key)
    chunked = f"{len(inner):x}\r\n".encode() + inner + b"\r\n0\r\n\r\n"
    auth = f"Authorization: Bearer {key}\r\n"
    chat = b'{"model":"fake","messages":[]}'

    def post(extra: str, body: bytes) -> bytes:
        head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n{auth}Content-Type: application/json\r\n{extra}\r\n"
        return head.encode() + body

    n = len(chat)
    attacks = [
        (
            "connection names content-length",
            post(f"Content-Length: {n + len(inner)}\r\nConnection: Content-Length\r\n", chat + inner),
        ),
        (
            "connection keep-alive, content-length",
            post(
                f"Content-Length: {n + len(inner)}\r\nConnection: keep-alive, Content-Length\r\n",
                chat + inner,
            ),
        ),
        (
            "connection names transfer-encoding",
            post("Transfer-Encoding: chunked\r\nConnection: Transfer-Encoding\r\n", chunked),
        ),
        ("connection names host", post(f"Content-Length: {n}\r\nConnection: Host\r\n", chat) + inner),
        (
            "connection names authorization",
            post(f"Content-Length: {n}\r\nConnection: Authorization\r\n", chat) + inner,
        ),
        ("CL then TE", post(f"Content-Length: {n}\r\nTransfer-Encoding: chunked\r\n", chunked)),
        ("TE then CL", post(f"Transfer-Encoding: chunked\r\nContent-Length: {len(chunked)}\r\n", chunked)),
        ("TE chunked alone", post("Transfer-Encoding: chunked\r\n", chunked)),
        ("TE xchunked", post(f"Transfer-Encoding: xchunked\r\nContent-Length: {n}\r\n", chat + inner)),
        ("TE space chunked", post(f"Transfer-Encoding : chunked\r\nContent-Length: {n}\r\n", chat + inner)),
        ("TE chunked, identity", post("Transfer-Encoding: chunked, identity\r\n", chunked)),
        (
            "duplicate CL differing",
            post(f"Content-Length: {n}\r\nContent-Length: {n + len(inner)}\r\n", chat + inner),
        ),
        ("duplicate CL same", post(f"Content-Length: {n}\r\nContent-Length: {n}\r\n", chat) + inner),
        ("CL list", post(f"Content-Length: {n}, {n + len(inner)}\r\n", chat + inner)),
        ("CL not a number", post("Content-Length: abc\r\n", chat + inner)),
        ("CL negative", post("Content-Length: -1\r\n", chat + inner)),
        ("CL plus sign", post(f"Content-Length: +{n}\r\n", chat + inner)),
        ("obs-fold header", post(f"Content-Length: {n}\r\nX-A: a\r\n b\r\n", chat) + inner),
        ("bare CR in header", post(f"Content-Length: {n}\r\nX-A: a\rb\r\n", chat) + inner),
        (
            "upgrade h2c",
            post(
                f"Content-Length: {n}\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n",
                chat,
            )
            + inner,
        ),
        ("upgrade websocket", post(f"Content-Length: {n}\r\nUpgrade: websocket\r\n", chat) + inner),
        (
            "expect 100-continue",
            post(
                f"Content-Length: {n + len(inner)}\r\nExpect: 100-continue\r\nConnection: Content-Length\r\n",
                chat + inner,
            ),
        ),
        ("pipelined models then private", _head("GET", "/v1/models", key) + inner),
        (
            "pipelined chat then private",
            post(f"Content-Length: {n}\r\n", chat) + inner + _head("GET", "/v1/models", key),
        ),
        ("pipelined private then models", inner + _head("GET", "/v1/models", key)),
        (
            "pipelined 3 private",
            _head("GET", "/v1/models", key)
            + smuggled(key, "/get_server_info")
            + smuggled(key, "/get_model_info"),
        ),
        ("non-ascii target", "GET /v1/mod\u00e9ls HTTP/1.1\r\nHost: gw\r\n\r\n".encode() + inner),
        (
            "http/1.0 keep-alive",
            f"GET /v1/models HTTP/1.0\r\nConnection: keep-alive\r\n{auth}\r\n".encode() + inner,
        ),
        ("http/0.9", b"GET /server_info\r\n"),
        (
            "two authorization headers",
            _head("GET", "/v1/models", key, extra="Authorization: Bearer wrong\r\n"),
        ),
        (  # the wrong one first: every value is checked, not only the first or the last
            "two authorization headers, the key last",
            _head(
                "GET",
                "/v1/models",
                None,
                extra=f"Authorization: Bearer wrong\r\nAuthorization: Bearer {key}\r\n",
            ),
        ),
        (
            "three authorization headers, the middle one wrong",
            _head(
                "GET",
                "/v1/models",
                key,
                extra=f"Authorization: Bearer wrong\r\nAuthorization: Bearer {key}\r\n",
            ),
        ),
        ("lowercase bearer", _head("GET", "/v1/models", None, extra=f"Authorization: bearer {key}\r\n")),
        (
            "key with trailing space",
            _head("GET", "/v1/models", None, extra=f"Authorization: Bearer {key} \r\n"),
        ),
        ("key in query", f"GET /v1/models?api_key={key} HTTP/1.1\r\nHost: gw\r\n\r\n".encode()),
    ]
    return attacks


def method_attacks(key: str) -> list[tuple[str, bytes]]:
    out = []
    for target, allowed in (
        ("/v1/chat/completions", "POST"),
        ("/v1/completions", "POST"),
        ("/v1/models", "GET"),
    ):
        for method in (
            "GET",
            "POST",
            "PUT",
            "DELETE",
            "PATCH",
            "OPTIONS",
            "HEAD",
            "TRACE",
            "CONNECT",
            "PROPFIND",
            "get",
        ):
            if method != allowed:
                out.append(
                    (f"{method} {target}", _head(method, target, key, body=b"{}" if method != "GET" else b""))
                )
    return out


def send(
    port: int, data: bytes, timeout: float = 3.0, host: str = "127.0.0.1", half_close: bool = True
) -> bytes:
    """Send raw bytes, half-close (unless the request is meant to look unfinished), and read every
    answer until the gateway closes (or times out)."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        out = b""
        try:
            s.sendall(data)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the gateway answered (and closed) before reading all of it
        try:
            while chunk := s.recv(65536):
                out += chunk
        except OSError:  # a timeout or a reset
            pass
    return out


def canaries(secrets: list[str]) -> list[bytes]:
    raw = [s.encode() for s in secrets]
    return raw + [base64.b64encode(s).rstrip(b"=") for s in raw]


def statuses(answer: bytes) -> list[int]:
    """Every status line's code in the answer bytes (pipelined answers included; an HTML error
    body may end without CRLF, so status lines are found anywhere)."""
    return [int(m) for m in re.findall(rb"HTTP/1\.[01] (\d{3}) ", answer)]
