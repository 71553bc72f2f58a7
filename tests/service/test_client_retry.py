"""ctxeng.client's retries against a real local HTTP server that answers from a script.

Each test starts an `http.server` in a thread whose handler plays the answers it is given in
order (a 429 with Retry-After, a 503, a connection dropped without a response, a reply too slow
for the client's timeout, then a success) and records what each request carried. The client
under test is the real one, over real sockets; only its waits are observed (a spy on
`time.sleep` that records the delay asked for and really sleeps), so no test reads a clock.
"""

from __future__ import annotations

import email.utils
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from ctxeng import client as ctxclient

JOB_ID = "0b9f6f1e-3f1c-4c39-9d55-2a4f1b0c7d10"
SUBMITTED = {"id": JOB_ID, "status": "queued", "url": f"/api/v1/assemblies/{JOB_ID}/", "html_url": f"/assemblies/{JOB_ID}/"}


@dataclass
class Answer:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False  # close the connection without a response
    stall: float = 0.0  # seconds to wait before answering (longer than the client's timeout)


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class ScriptedServer:
    """A real HTTP server answering each request with the next scripted Answer (the last repeats)."""

    def __init__(self, answers: list[Answer]) -> None:
        self.answers = list(answers)
        self.seen: list[Seen] = []
        self.release = threading.Event()  # set at teardown: a stalled handler stops waiting
        script = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                script.seen.append(Seen(self.command, self.path, dict(self.headers), json.loads(raw) if raw else None))
                answer = script.answers.pop(0) if len(script.answers) > 1 else script.answers[0]
                if answer.stall:
                    script.release.wait(answer.stall)
                if answer.drop:
                    self.close_connection = True
                    return
                data = json.dumps(answer.body if answer.body is not None else {}).encode()
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up on a stalled answer

            do_GET = do_POST = _answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[ScriptedServer] = []

    def start(*answers: Answer) -> ScriptedServer:
        servers.append(ScriptedServer(list(answers)))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    """The delays the client waited for, in order (it still really sleeps). `ctxclient.time` is the
    process's one `time` module, so only this test's thread is counted: a background thread of the
    process (a span exporter, a broker connection left by another test) may sleep meanwhile."""
    asked: list[float] = []
    real_sleep = time.sleep
    caller = threading.get_ident()

    def spy(seconds: float) -> None:
        if threading.get_ident() == caller:
            asked.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(ctxclient.time, "sleep", spy)
    return asked


def client_for(server: ScriptedServer, **options: Any) -> ctxclient.Client:
    return ctxclient.Client(server.url, "token", **{"backoff_base": 0.01, "backoff_cap": 5.0, **options})


def test_a_429_is_retried_after_its_retry_after_seconds_with_the_same_idempotency_key(serve, sleeps):
    server = serve(Answer(429, {"errors": ["throttled"]}, {"Retry-After": "1"}), Answer(202, SUBMITTED))
    assert client_for(server).submit({"run_id": "r"}) == SUBMITTED
    assert [s.method for s in server.seen] == ["POST", "POST"]
    keys = [s.headers["Idempotency-Key"] for s in server.seen]
    assert keys[0] == keys[1]
    assert uuid.UUID(keys[0].removeprefix("ctxeng-client-")).version == 4
    assert server.seen[0].body == server.seen[1].body == {"run_id": "r"}
    assert len(sleeps) == 1 and 1.0 <= sleeps[0] <= 1.01  # Retry-After plus at most backoff_base of jitter


def test_the_callers_idempotency_key_is_sent_on_every_attempt(serve, sleeps):
    server = serve(Answer(503, headers={"Retry-After": "0"}), Answer(drop=True), Answer(202, SUBMITTED))
    client_for(server).submit({"run_id": "r"}, idempotency_key="run-42/step-19")
    assert [s.headers["Idempotency-Key"] for s in server.seen] == ["run-42/step-19"] * 3


def test_two_submits_without_a_key_send_different_keys(serve):
    server = serve(Answer(202, SUBMITTED))
    client = client_for(server)
    client.submit({}), client.submit({})
    assert server.seen[0].headers["Idempotency-Key"] != server.seen[1].headers["Idempotency-Key"]


def test_a_503_with_an_http_date_retry_after_is_retried(serve, sleeps):
    soon = email.utils.formatdate(time.time() + 2, usegmt=True)
    server = serve(Answer(503, {"errors": ["maintenance"]}, {"Retry-After": soon}), Answer(200, {"status": "ready"}))
    assert client_for(server).job(JOB_ID) == {"status": "ready"}
    assert len(server.seen) == 2
    assert 0 < sleeps[0] <= 2.01  # whole seconds in the date: up to two from now


def test_without_retry_after_the_waits_are_capped_exponential_backoff_with_jitter(serve, sleeps):
    server = serve(Answer(429), Answer(429), Answer(429), Answer(429), Answer(200, {"status": "ready"}))
    client_for(server, backoff_base=0.02, backoff_cap=0.05, max_retries=4).job(JOB_ID)
    assert len(sleeps) == 4
    for attempt, delay in enumerate(sleeps):
        assert 0 <= delay <= min(0.05, 0.02 * 2**attempt)


def test_rate_limited_is_raised_with_retry_after_once_the_retries_are_spent(serve, sleeps):
    server = serve(Answer(429, {"errors": ["throttled"]}, {"Retry-After": "0"}))
    with pytest.raises(ctxclient.RateLimited) as caught:
        client_for(server, max_retries=2).job(JOB_ID)
    assert len(server.seen) == 3
    assert caught.value.status == 429 and caught.value.retry_after == 0.0 and caught.value.errors == ["throttled"]
    assert isinstance(caught.value, ctxclient.ClientError)


def test_service_unavailable_is_raised_once_the_retries_are_spent(serve, sleeps):
    server = serve(Answer(503, {"errors": ["down"]}))
    with pytest.raises(ctxclient.ServiceUnavailable) as caught:
        client_for(server, max_retries=1).manifest(JOB_ID)
    assert len(server.seen) == 2 and caught.value.retry_after is None
    assert isinstance(caught.value, ctxclient.ServerError)


def test_a_retry_after_beyond_the_backoff_cap_is_raised_at_once(serve, sleeps):
    server = serve(Answer(429, headers={"Retry-After": "120"}))
    with pytest.raises(ctxclient.RateLimited) as caught:
        client_for(server, backoff_cap=30).job(JOB_ID)
    assert caught.value.retry_after == 120.0
    assert len(server.seen) == 1 and sleeps == []


def test_a_dropped_connection_is_retried_on_a_get(serve, sleeps):
    server = serve(Answer(drop=True), Answer(200, {"status": "ready"}))
    assert client_for(server).job(JOB_ID) == {"status": "ready"}
    assert len(server.seen) == 2


def test_a_reply_slower_than_the_request_timeout_is_retried(serve, sleeps):
    server = serve(Answer(stall=30), Answer(200, {"status": "ready"}))
    assert client_for(server, request_timeout=0.5).job(JOB_ID) == {"status": "ready"}
    assert len(server.seen) == 2


def test_a_usage_report_is_retried_after_a_dropped_connection_with_the_same_body(serve, sleeps):
    usage = {"id": JOB_ID, "input_tokens": 10, "cached_tokens": 0, "output_tokens": 2}
    server = serve(Answer(drop=True), Answer(200, usage))
    assert client_for(server).report_usage(JOB_ID, input_tokens=10, output_tokens=2) == usage
    assert [s.body for s in server.seen] == [{"input_tokens": 10, "cached_tokens": 0, "output_tokens": 2}] * 2


def test_a_connection_error_is_not_retried_on_a_call_that_is_not_idempotent(serve, sleeps):
    server = serve(Answer(drop=True), Answer(200, {}))
    with pytest.raises(ctxclient.ConnectionFailed):
        client_for(server)._call("POST", "/api/v1/anything/", {}, idempotent=False)
    assert len(server.seen) == 1 and sleeps == []


def test_a_504_outcome_unknown_submit_is_retried_after_retry_after_with_the_same_key(serve, sleeps):
    """The server's database broke off in the commit: the job may exist. The retry carries the same
    Idempotency-Key, so the server returns the saved job rather than making a second one."""
    server = serve(Answer(504, {"errors": ["may have been saved"]}, {"Retry-After": "2"}), Answer(200, SUBMITTED))
    assert client_for(server).submit({"run_id": "r"}) == SUBMITTED
    keys = [s.headers["Idempotency-Key"] for s in server.seen]
    assert len(keys) == 2 and keys[0] == keys[1] and sleeps == [2.0]


def test_a_504_is_not_retried_on_a_call_that_is_not_idempotent(serve, sleeps):
    server = serve(Answer(504, {"errors": ["may have been saved"]}, {"Retry-After": "2"}), Answer(200, {}))
    with pytest.raises(ctxclient.OutcomeUnknown) as caught:
        client_for(server)._call("POST", "/api/v1/anything/", {}, idempotent=False)
    assert len(server.seen) == 1 and sleeps == []
    assert caught.value.status == 504 and caught.value.retry_after == 2.0 and isinstance(caught.value, ctxclient.ServerError)


def test_an_unreachable_server_raises_connection_failed_after_the_retries(serve, sleeps):
    server = serve(Answer())
    server.stop()  # nothing listens on its port any more
    with pytest.raises(ctxclient.ConnectionFailed, match="cannot reach"):
        client_for(server, max_retries=2).job(JOB_ID)
    assert len(sleeps) == 2


def test_other_errors_are_not_retried(serve, sleeps):
    server = serve(Answer(400, {"errors": ["candidates[3].item_id: field required"]}))
    with pytest.raises(ctxclient.InvalidRequest):
        client_for(server).submit({})
    assert len(server.seen) == 1 and sleeps == []


def test_assemble_waits_through_a_throttled_long_poll(serve, sleeps):
    final = {"id": JOB_ID, "status": "ready", "manifest": {"assembly": {"status": "ready"}}, "input": {"messages": []}}
    server = serve(Answer(202, SUBMITTED), Answer(429, headers={"Retry-After": "0"}), Answer(200, final))
    assembly = client_for(server).assemble({"run_id": "r"}, timeout=120)
    assert assembly.status == "ready" and assembly.input == {"messages": []}
    assert assembly.manifest == {"assembly": {"status": "ready"}} and "manifest" not in assembly.job
    assert [s.path for s in server.seen][1:] == [f"/api/v1/assemblies/{JOB_ID}/?wait=30&include=manifest%2Cinput"] * 2


@pytest.mark.parametrize(("header", "seconds"), [
    ("3", 3.0), (" 0 ", 0.0), ("1.5", 1.5), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0), ("soon", None), ("", None),
    (None, None), ("-5", 0.0), ("nan", None),
])
def test_retry_after_reads_seconds_and_http_dates(header, seconds):
    assert ctxclient.retry_after_seconds(header) == seconds


def test_retry_after_reads_a_future_http_date_as_seconds_from_now():
    in_a_minute = email.utils.formatdate(time.time() + 60, usegmt=True)
    assert 58 <= ctxclient.retry_after_seconds(in_a_minute) <= 60


def test_assemble_waits_the_retry_after_of_a_capped_long_poll(serve, sleeps):
    """The server's long-poll caps answer a queued job at once with Retry-After (issue 40, finding
    2): the client waits that long before polling again, instead of polling in a loop."""
    final = {"id": JOB_ID, "status": "ready", "manifest": {"assembly": {"status": "ready"}}, "input": {"messages": []}}
    server = serve(Answer(202, SUBMITTED), Answer(200, {"id": JOB_ID, "status": "queued"}, {"Retry-After": "1"}),
                   Answer(200, final))
    assembly = client_for(server).assemble({"run_id": "r"}, timeout=120)
    assert assembly.status == "ready" and len(server.seen) == 3
    assert sleeps == [1.0]
