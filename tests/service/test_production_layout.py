"""The production layout the README documents survives slow clients and huge bodies (issue 30,
findings 6, 7 and the 414 of 12): Debian's nginx with deploy/nginx.conf in front of a real gunicorn
with 2 sync workers, on loopback ports (tests/layout.py).

The attack of finding 7: four connections that send headers without the final CRLF held both
sync workers until gunicorn's WORKER TIMEOUT (`/healthz` unanswered for 40 s). nginx holds such
connections itself; gunicorn only receives whole requests. The probes use counts and generous
deadlines, never a measured time.
"""

from __future__ import annotations

import http.client
import json
import socket

import pytest

SLOW_CLIENTS = 6  # more than the workers (2), more than the attack (4)


def request(server, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
            timeout: float = 60) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def open_slow_header_connections(server, count: int) -> list[socket.socket]:
    """Connections that send a request line and a header, then never the blank line ending them."""
    held = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1\r\n")
        held.append(sock)
    return held


@pytest.fixture
def layout(gunicorn, nginx):
    app = gunicorn(workers=2)
    return app, nginx(app)


def test_slow_header_connections_do_not_stall_the_workers_behind_nginx(layout):
    app, front = layout
    held = open_slow_header_connections(front, SLOW_CLIENTS)
    try:
        answers = [request(front, "GET", "/healthz", timeout=30) for _ in range(5)]
        assert [(status, json.loads(body)) for status, _, body in answers] == [(200, {"status": "ok"})] * 5
        for sock in held:  # still held open by nginx, never handed to a worker
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
    finally:
        for sock in held:
            sock.close()
    assert "WORKER TIMEOUT" not in app.log()


def test_a_request_line_too_long_under_api_is_a_json_414(layout):
    _, front = layout
    status, headers, body = request(front, "GET", "/api/v1/assemblies/?run_id=" + "r" * 6000)
    assert status == 414 and headers["content-type"] == "application/json"
    assert json.loads(body) == {"errors": ["path: the request line is longer than 4096 bytes"]}


def test_a_body_over_the_limit_is_a_json_413_before_gunicorn_reads_it(layout, settings):
    _, front = layout
    body = b"x" * (settings.CTXENG_MAX_REQUEST_BYTES + 1)
    status, headers, answer = request(front, "POST", "/api/v1/assemblies/", body=body,
                                      headers={"Content-Type": "application/json"})
    assert status == 413 and headers["content-type"] == "application/json"
    assert json.loads(answer)["errors"] == [
        f"body: larger than the limit of {settings.CTXENG_MAX_REQUEST_BYTES} bytes (CTXENG_MAX_REQUEST_BYTES)"]


@pytest.mark.parametrize("path", ["/api/v1/assemblies/", "/api/v1/policies/source-research/", "/runs/"])
def test_a_trace_is_a_json_405_with_allow(layout, path):
    """Issue 40, finding 9: nginx refuses TRACE before any location; its answer was an HTML page."""
    _, front = layout
    status, headers, body = request(front, "TRACE", path)
    assert status == 405 and headers["content-type"] == "application/json" and "GET" in headers["allow"]
    assert json.loads(body) == {"errors": ["method: not allowed (TRACE is never served)"]}


def test_an_unreachable_app_is_a_json_502_under_api(layout):
    app, front = layout
    app.stop()
    status, headers, body = request(front, "GET", "/api/v1/policies/")
    assert status == 502 and headers["content-type"] == "application/json" and headers["retry-after"] == "5"
    assert json.loads(body)["errors"][0].startswith("the application server is not answering")


def test_huge_policy_yaml_on_the_layout_is_a_413_and_both_workers_stay_up(transactional_db, layout, editor_user):
    """Finding 6 on the layout: two 2.3 MB, 200,000-key validations took the 2-worker tier down."""
    from rest_framework.authtoken.models import Token

    app, front = layout
    token = Token.objects.get_or_create(user=editor_user)[0].key
    text = "".join(f"key{i}: {i}\n" for i in range(200_000))
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    answers = [request(front, "POST", "/api/v1/policies/validate/", body=json.dumps(text).encode(), headers=headers)
               for _ in range(2)]
    assert [status for status, _, _ in answers] == [413, 413]
    assert all("bytes of YAML, more than the limit 1048576" in json.loads(body)["errors"][0] for _, _, body in answers)
    assert request(front, "GET", "/healthz")[0] == 200
    assert "WORKER TIMEOUT" not in app.log()
