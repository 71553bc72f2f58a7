"""ctxeng.client against a hostile server (issue 40, finding 4): every failure is a typed
ClientError, the token never leaves base_url's origin, one deadline bounds each exchange however
slowly the bytes come, and a response is read only up to max_response_bytes.

The server is real: a TCP server on 127.0.0.1 whose handler thread writes whatever bytes the test
scripts (a redirect elsewhere, a body dripped a byte at a time, 600 MB announced, HTML, truncated
JSON, a list, 200,000 levels of nesting, `errors` that are no list, status 299 ...), and records
each request it read. No test reads a clock: a slow server is shown bounded by the client raising
its own deadline error (RequestTimedOut) while the server still had bytes to drip.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from ctxeng import client as ctxclient

JOB_ID = "0b9f6f1e-3f1c-4c39-9d55-2a4f1b0c7d10"
SUBMITTED = {"id": JOB_ID, "status": "queued", "url": f"/api/v1/assemblies/{JOB_ID}/"}


@dataclass
class Request:
    head: str
    body: bytes

    @property
    def line(self) -> str:
        return self.head.split("\r\n", 1)[0]

    def header(self, name: str) -> str | None:
        for line in self.head.split("\r\n")[1:]:
            key, _, value = line.partition(":")
            if key.strip().lower() == name.lower():
                return value.strip()
        return None


Behaviour = Callable[[socket.socket, Request, "Hostile"], None]


class Hostile:
    """A TCP server answering each request with the next scripted behaviour (the last repeats)."""

    def __init__(self, behaviours: list[Behaviour]) -> None:
        self.behaviours = list(behaviours)
        self.requests: list[Request] = []
        self.sent = 0  # body bytes written before the client went away
        self.stop_event = threading.Event()
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock: socket.socket = self.request
                sock.settimeout(30)
                data = b""
                try:
                    while b"\r\n\r\n" not in data:
                        chunk = sock.recv(65536)
                        if not chunk:
                            return
                        data += chunk
                    head, _, body = data.partition(b"\r\n\r\n")
                    request = Request(head.decode("latin-1"), body)
                    length = int(request.header("Content-Length") or 0)
                    while len(request.body) < length:
                        request.body += sock.recv(65536)
                    server.requests.append(request)
                    behaviour = server.behaviours.pop(0) if len(server.behaviours) > 1 else server.behaviours[0]
                    behaviour(sock, request, server)
                except OSError:
                    pass  # the client hung up: what several behaviours wait for

        self.tcp = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.tcp.daemon_threads = True
        self.port = self.tcp.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.tcp.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stop_event.set()
        self.tcp.shutdown()
        self.tcp.server_close()


@pytest.fixture
def hostile() -> Iterator[Callable[..., Hostile]]:
    servers: list[Hostile] = []

    def start(*behaviours: Behaviour) -> Hostile:
        servers.append(Hostile(list(behaviours)))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def client_for(server: Hostile, **options: Any) -> ctxclient.Client:
    return ctxclient.Client(server.url, "secret-token", **{"backoff_base": 0.01, "max_retries": 0, **options})


# --------------------------------------------------------------------------- behaviours


def answer(status: int, body: bytes | str | Any = b"", headers: dict[str, str] | None = None, *,
           reason: str = "X", length: bool = True) -> Behaviour:
    if not isinstance(body, bytes | str):
        body = json.dumps(body)
    raw = body.encode() if isinstance(body, str) else body

    def behave(sock: socket.socket, request: Request, server: Hostile) -> None:
        head = [f"HTTP/1.1 {status} {reason}", "Connection: close", *(f"{k}: {v}" for k, v in (headers or {}).items())]
        if length:
            head.append(f"Content-Length: {len(raw)}")
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + raw)

    return behave


def drip_body(every: float = 0.3, count: int = 400) -> Behaviour:
    """Headers at once announcing `count` bytes, then one byte every `every` s (2 minutes in all)."""

    def behave(sock: socket.socket, request: Request, server: Hostile) -> None:
        sock.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {count}\r\n\r\n".encode())
        for _ in range(count):
            if server.stop_event.wait(every):
                return
            sock.sendall(b" ")
            server.sent += 1

    return behave


def drip_headers(every: float = 0.3, count: int = 400) -> Behaviour:
    """A status line, then a header a byte at a time, never finished within 2 minutes."""

    def behave(sock: socket.socket, request: Request, server: Hostile) -> None:
        sock.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        for _ in range(count):
            if server.stop_event.wait(every):
                return
            sock.sendall(b"a")
            server.sent += 1

    return behave


def flood(declared: int | None) -> Behaviour:
    """A 600 MB body (declared, or delimited by the connection's close) written as fast as the
    client reads it; `server.sent` counts what it took before hanging up."""

    def behave(sock: socket.socket, request: Request, server: Hostile) -> None:
        head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
        head += f"Content-Length: {declared}\r\n\r\n" if declared is not None else "\r\n"
        sock.sendall(head.encode())
        block = b"[" + b"0," * 32767 + b"0"
        while server.sent < 600 * 1024 * 1024:
            sock.sendall(block)
            server.sent += len(block)

    return behave


# --------------------------------------------------------------------------- credentials and redirects


def test_a_redirect_to_another_host_is_refused_and_the_token_never_sent_there(hostile):
    elsewhere = hostile(answer(200, {"status": "ready"}))
    server = hostile(answer(302, headers={"Location": f"{elsewhere.url}/api/v1/assemblies/{JOB_ID}/"}))
    with pytest.raises(ctxclient.ProtocolError, match="not followed"):
        client_for(server).job(JOB_ID)
    assert elsewhere.requests == []
    assert server.requests[0].header("Authorization") == "Token secret-token"


@pytest.mark.parametrize("location", ["http://localhost:{port}/api/v1/x/", "https://127.0.0.1:{port}/api/v1/x/",
                                      "//127.0.0.2:{port}/api/v1/x/"])
def test_a_redirect_to_another_name_scheme_or_address_of_the_origin_is_refused(hostile, location):
    server = hostile(answer(301, headers={"Location": location}), answer(200, {"status": "ready"}))
    server.behaviours[0] = answer(301, headers={"Location": location.format(port=server.port)})
    with pytest.raises(ctxclient.ProtocolError):
        client_for(server).job(JOB_ID)
    assert len(server.requests) == 1


def test_a_same_origin_redirect_of_a_get_is_followed_with_the_token(hostile):
    server = hostile(answer(302, headers={"Location": f"/api/v1/assemblies/{JOB_ID}/moved/"}), answer(200, {"status": "ready"}))
    assert client_for(server).job(JOB_ID) == {"status": "ready"}
    assert [r.line.split()[1] for r in server.requests] == [f"/api/v1/assemblies/{JOB_ID}/", f"/api/v1/assemblies/{JOB_ID}/moved/"]
    assert server.requests[1].header("Authorization") == "Token secret-token"


def test_a_redirect_of_a_post_is_not_followed(hostile):
    server = hostile(answer(307, headers={"Location": "/api/v1/assemblies/again/"}))
    with pytest.raises(ctxclient.ProtocolError, match="only a GET to the same origin"):
        client_for(server).submit({"run_id": "r"})
    assert len(server.requests) == 1


def test_a_redirect_loop_ends_in_a_protocol_error(hostile):
    server = hostile(answer(302, headers={"Location": "/api/v1/loop/"}))
    with pytest.raises(ctxclient.ProtocolError, match="more than 5 redirects"):
        client_for(server).manifest(JOB_ID)
    assert len(server.requests) == 6


def test_a_base_url_that_is_no_http_url_is_refused():
    for bad in ("ftp://127.0.0.1/", "127.0.0.1:8000", "http://"):
        with pytest.raises(ValueError, match="base_url"):
            ctxclient.Client(bad, "t")


# --------------------------------------------------------------------------- one deadline


def test_a_body_dripped_a_byte_at_a_time_ends_at_the_deadline(hostile):
    server = hostile(drip_body())
    with pytest.raises(ctxclient.RequestTimedOut):
        client_for(server, request_timeout=1).manifest(JOB_ID)
    assert server.sent < 400  # the client left while the server still had bytes to drip


def test_headers_dripped_a_byte_at_a_time_end_at_the_deadline(hostile):
    server = hostile(drip_headers())
    with pytest.raises(ctxclient.RequestTimedOut):
        client_for(server, request_timeout=1).manifest(JOB_ID)
    assert server.sent < 400


def test_assemble_ends_within_its_timeout_against_a_dripping_long_poll(hostile):
    """The issue's case: request_timeout and timeout set, every retry of the long-poll dripped."""
    server = hostile(answer(202, SUBMITTED), drip_body())
    with pytest.raises((ctxclient.RequestTimedOut, ctxclient.Timeout)):
        client_for(server, request_timeout=1, max_retries=4).assemble({"run_id": "r"}, timeout=1)
    assert server.sent < 400


# --------------------------------------------------------------------------- size


@pytest.mark.parametrize("declared", [600 * 1024 * 1024, None], ids=["content-length", "until-close"])
def test_a_600_mb_body_is_refused_past_the_cap_without_reading_it(hostile, declared):
    server = hostile(flood(declared))
    with pytest.raises(ctxclient.ResponseTooLarge):
        client_for(server, max_response_bytes=1024 * 1024).manifest(JOB_ID)
    assert server.sent < 64 * 1024 * 1024  # what socket buffers hold, not the 600 MB


# --------------------------------------------------------------------------- bodies and statuses

DEEP = "[" * 200_000 + "]" * 200_000

PROTOCOL_ERRORS = {
    "html": answer(200, "<html><body>maintenance</body></html>", {"Content-Type": "text/html"}),
    "truncated json": answer(200, '{"id": "x", "sta'),
    "a list": answer(200, [1, 2, 3]),
    "a string": answer(200, '"ready"'),
    "200k deep": answer(200, DEEP),
    "not utf-8": answer(200, b'{"status": "\xff\xfe"}'),
    "empty 200": answer(200, b""),
    "status 299": answer(299, {"status": "ready"}),
    "status 204": answer(204, b"", length=False),
    "status 100-like 199": answer(199, {"status": "ready"}),
    "an unfollowable 304": answer(304, b""),
}


@pytest.mark.parametrize("case", PROTOCOL_ERRORS)
def test_an_answer_that_is_not_the_apis_is_a_protocol_error(hostile, case):
    server = hostile(PROTOCOL_ERRORS[case])
    with pytest.raises(ctxclient.ProtocolError):
        client_for(server).job(JOB_ID)


@pytest.mark.parametrize(("errors", "shown"), [
    ("one string", ['"one string"']), ({"field": "bad"}, ['{"field": "bad"}']), ([1, 2], ["[1, 2]"]),
    ([], ["[]"]), (None, ['HTTP 400: {"errors": null}']),
])
def test_errors_of_any_shape_become_a_list_of_strings(hostile, errors, shown):
    server = hostile(answer(400, {"errors": errors}))
    with pytest.raises(ctxclient.InvalidRequest) as caught:
        client_for(server).submit({})
    assert caught.value.errors == shown and caught.value.status == 400


@pytest.mark.parametrize(("status", "body", "error"), [
    (502, "<html>Bad Gateway</html>", ctxclient.ServerError),
    (400, DEEP, ctxclient.InvalidRequest),
    (418, "teapot", ctxclient.ClientError),
    (429, "[]", ctxclient.RateLimited),
    (600, "{}", ctxclient.ProtocolError),
])
def test_an_error_status_with_any_body_is_its_typed_error(hostile, status, body, error):
    server = hostile(answer(status, body))
    with pytest.raises(error) as caught:
        client_for(server).manifest(JOB_ID)
    assert all(isinstance(e, str) for e in caught.value.errors) and caught.value.status == status


@pytest.mark.parametrize(("submitted", "job"), [({}, None), ({"id": 7}, None), (SUBMITTED, {"id": JOB_ID}),
                                                (SUBMITTED, {"status": ["ready"]})])
def test_an_answer_missing_a_field_the_api_always_sends_is_a_protocol_error(hostile, submitted, job):
    server = hostile(answer(202, submitted), answer(200, job or {}))
    with pytest.raises(ctxclient.ProtocolError):
        client_for(server).assemble({"run_id": "r"}, timeout=5)


@pytest.mark.parametrize("raw", [b"HTTP/1.1 abc\r\n\r\n", b"garbage\r\n\r\n",
                                 b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70_000 + b"\r\n\r\n",
                                 b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"status\""])
def test_a_broken_status_line_header_or_short_body_is_a_connection_failure(hostile, raw):
    def behave(sock: socket.socket, request: Request, server: Hostile) -> None:
        sock.sendall(raw)

    server = hostile(behave)
    with pytest.raises(ctxclient.ConnectionFailed):
        client_for(server).manifest(JOB_ID)


@pytest.mark.parametrize(("url", "origin"), [
    ("https://Ctx.Example/api/", ("https", "ctx.example", 443)),
    ("https://ctx.example:443/x", ("https", "ctx.example", 443)),
    ("http://ctx.example/", ("http", "ctx.example", 80)),
    ("http://ctx.example:8000/", ("http", "ctx.example", 8000)),
    ("ftp://ctx.example/", None),
    ("https:///no-host", None),
    ("http://ctx.example:99999/", None),
])
def test_an_origin_is_the_scheme_the_host_and_the_port_with_the_schemes_default(url, origin):
    """What a redirect is compared by: `https://h/` and `https://h:443/` are one origin, and `http` is
    another even on the same host (its default port 80)."""
    assert ctxclient._origin(url) == origin
