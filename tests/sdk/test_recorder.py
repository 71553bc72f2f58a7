"""The SDK's recorder on its own: a local session records every step without waiting on the network,
spools what an unreachable service cannot take, within its bounds (the dropped counted), and a new
recorder on the same spool sends what an earlier process left there, each step once.

The service here is a small stand-in for `POST /api/v1/recorded-steps/` (tests/service/
test_recorded_steps_live.py runs the same against the real server and a real worker): it stores
each idempotency key once, as the service does, and can be made unreachable."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ctxeng import sdk

PRINCIPAL = {"id": "agent", "tenant": "tenant-x", "project": "p"}
HISTORY = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello"}]


class StandIn:
    """Stores steps by idempotency key; `bodies` counts every step received, keys and all."""

    def __init__(self) -> None:
        self.stored: dict[str, dict] = {}
        self.received: list[str] = []
        self.batches: list[list[str]] = []  # the keys of each POST, in arrival order
        self.purged = False  # True: a step naming content by reference is refused as the service does (409)
        self.dropped: dict[tuple[str, str], int] = {}
        self.lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                results = []
                with stand_in.lock:
                    stand_in.batches.append([step["idempotency_key"] for step in body["steps"]])
                    for step in body["steps"]:
                        key = step["idempotency_key"]
                        stand_in.received.append(key)
                        if stand_in.purged and any("content_ref" in c for c in step["request"]["candidates"]):
                            results.append({"idempotency_key": key, "outcome": "refused", "status": 409, "errors": [
                                "steps[0].request.candidates[2].content_ref: sha256:... is not stored in tenant 'tenant-x'"]})
                            continue
                        outcome = "duplicate" if key in stand_in.stored else "stored"
                        stand_in.stored.setdefault(key, step)
                        results.append({"idempotency_key": key, "outcome": outcome})
                    for row in body["dropped"]:
                        stand_in.dropped[(row["tenant"], row["run_id"])] = row["count"]
                raw = json.dumps({"results": results, "dropped": body["dropped"]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stand_in():
    server = StandIn()
    yield server
    server.close()


@pytest.fixture
def unreachable() -> str:
    """A URL nothing listens on (the port was free a moment ago): connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _run(session: sdk.Session, steps: int) -> None:
    history = list(HISTORY)
    for n in range(steps):
        session.step(history)
        history += [{"role": "assistant", "content": f"reply {n}"}, {"role": "user", "content": f"more {n}"}]


def test_a_local_session_records_every_step_once(stand_in):
    recorder = sdk.Recorder(stand_in.url, "t")
    with sdk.Session("chat-agent", principal=PRINCIPAL, run_id="run-rec", record=recorder) as session:
        _run(session, 5)
    assert recorder.status == {"pending": 0, "sent": 5, "dropped": 0, "spooled": 0, "refused": 0}
    assert sorted(stand_in.stored) == [f"run-rec/step-{n}" for n in range(1, 6)]
    step = stand_in.stored["run-rec/step-3"]
    assert step["request"]["step_id"] == step["manifest"]["assembly"]["step_id"] == "step-3"
    assert step["manifest"] == session.steps[2].sealed_manifest
    recorder.close()


def test_steps_share_a_request_until_the_batch_is_full_and_a_flush_sends_at_once(stand_in):
    # batch_delay far longer than the test: only a full batch or the flush can send
    recorder = sdk.Recorder(stand_in.url, "t", batch_size=3, batch_delay=3600)
    session = sdk.Session("chat-agent", principal=PRINCIPAL, run_id="run-batch", record=recorder)
    _run(session, 7)
    assert session.close(timeout=60) is True
    assert stand_in.batches[:2] == [[f"run-batch/step-{n}" for n in (1, 2, 3)], [f"run-batch/step-{n}" for n in (4, 5, 6)]]
    assert stand_in.batches[2:] == [["run-batch/step-7"]]
    recorder.close()


LONG = "The release notes of 2.1, as the tool returned them. " * 8  # more than REF_MIN characters


def _sent_candidate(stand_in: StandIn, key: str) -> dict:
    [candidate] = [c for c in stand_in.stored[key]["request"]["candidates"]
                   if c.get("content") == LONG or "content_ref" in c]
    return candidate


def test_a_long_content_the_service_acknowledged_is_sent_by_reference_after(stand_in):
    recorder = sdk.Recorder(stand_in.url, "t")
    session = sdk.Session("chat-agent", principal=PRINCIPAL, run_id="run-ref", record=recorder)
    history = [*HISTORY, {"role": "assistant", "content": LONG}, {"role": "user", "content": "and?"}]
    session.step(history)
    assert session.close(timeout=60) is True  # step 1 acknowledged: its long content is known to be stored
    session.step(history)
    assert session.close(timeout=60) is True
    first, second = _sent_candidate(stand_in, "run-ref/step-1"), _sent_candidate(stand_in, "run-ref/step-2")
    assert first["content"] == LONG and "content_ref" not in first
    assert "content" not in second and second["content_ref"] == first["content_hash"]
    assert [("content" if k == "content_ref" else k) for k in second] == list(first)  # in the place of the content
    assert [c for c in stand_in.stored["run-ref/step-2"]["request"]["candidates"] if c.get("content") == "Hello"]
    recorder.close()


def test_a_reference_the_service_lacks_is_sent_again_whole(stand_in):
    recorder = sdk.Recorder(stand_in.url, "t")
    session = sdk.Session("chat-agent", principal=PRINCIPAL, run_id="run-purged", record=recorder)
    history = [*HISTORY, {"role": "assistant", "content": LONG}, {"role": "user", "content": "and?"}]
    session.step(history)
    assert session.close(timeout=60) is True
    stand_in.purged = True  # the service lost the content meanwhile (retention)
    session.step(history)
    assert session.close(timeout=60) is True
    assert recorder.status == {"pending": 0, "sent": 2, "dropped": 0, "spooled": 0, "refused": 0}
    assert stand_in.received == ["run-purged/step-1", "run-purged/step-2", "run-purged/step-2"]
    assert _sent_candidate(stand_in, "run-purged/step-2")["content"] == LONG
    recorder.close()


def test_steps_go_on_while_the_service_is_unreachable_and_wait_in_the_spool(unreachable, tmp_path):
    recorder = sdk.Recorder(unreachable, "t", spool_dir=tmp_path)
    session = sdk.Session("chat-agent", principal=PRINCIPAL, run_id="run-down", record=recorder)
    _run(session, 4)
    assert [s.status for s in session.steps] == ["ready"] * 4  # no step raised or was held back
    assert session.close(timeout=1) is False
    status = recorder.close(timeout=0)
    assert status == {"pending": 4, "sent": 0, "dropped": 0, "spooled": 4, "refused": 0}
    assert len(list(tmp_path.glob("*.step"))) == 4
    assert not list(tmp_path.glob(".tmp-*"))  # every file written whole


def test_the_spool_keeps_its_bound_and_counts_what_it_dropped(unreachable, tmp_path):
    recorder = sdk.Recorder(unreachable, "t", spool_dir=tmp_path, max_queue=2, max_spool=3)
    session = sdk.Session("chat-agent", principal=PRINCIPAL, run_id="run-full", record=recorder)
    _run(session, 10)
    status = recorder.close(timeout=0)
    assert status["spooled"] == len(list(tmp_path.glob("*.step"))) == 3
    assert status["dropped"] == 7 and status["sent"] == 0
    kept = sorted(json.loads(p.read_text().split("\n", 1)[0])["key"] for p in tmp_path.glob("*.step"))
    assert kept == ["run-full/step-10", "run-full/step-8", "run-full/step-9"]  # the oldest were dropped
    assert json.loads((tmp_path / "dropped.json").read_text()) == [{"tenant": "tenant-x", "run_id": "run-full", "count": 7}]


def test_without_a_spool_a_full_queue_drops_its_oldest_and_counts_them(unreachable):
    recorder = sdk.Recorder(unreachable, "t", max_queue=2)
    session = sdk.Session("chat-agent", principal=PRINCIPAL, record=recorder)
    _run(session, 5)
    status = recorder.close(timeout=0)
    assert status["dropped"] == 5 and status["pending"] == 0  # closed without a spool: nothing can wait


def test_a_new_recorder_on_the_spool_sends_what_an_earlier_process_left_each_step_once(unreachable, stand_in, tmp_path):
    first = sdk.Recorder(unreachable, "t", spool_dir=tmp_path, max_spool=3)
    _run(sdk.Session("chat-agent", principal=PRINCIPAL, run_id="run-restart", record=first), 5)
    first.close(timeout=0)

    second = sdk.Recorder(stand_in.url, "t", spool_dir=tmp_path)
    assert second.flush(timeout=60) is True
    assert second.status == {"pending": 0, "sent": 3, "dropped": 2, "spooled": 0, "refused": 0}
    assert sorted(stand_in.received) == ["run-restart/step-3", "run-restart/step-4", "run-restart/step-5"]
    assert stand_in.dropped == {("tenant-x", "run-restart"): 2}  # the run learns how many it lacks
    assert not list(Path(tmp_path).glob("*.step"))
    second.close()


def test_a_remote_session_does_not_take_a_recorder(unreachable):
    with pytest.raises(sdk.SDKError, match="record: for a local session"):
        sdk.Session("chat-agent", url=unreachable, token="t", principal=PRINCIPAL, record=sdk.Recorder(unreachable, "t"))


def test_a_recorder_that_breaks_never_breaks_the_step():
    class Broken:
        def record(self, request, manifest):
            raise RuntimeError("disk on fire")

        def flush(self, timeout=None):
            raise RuntimeError("still on fire")

    session = sdk.Session("chat-agent", principal=PRINCIPAL, record=Broken())
    with pytest.warns(UserWarning, match="recording this session's steps failed"):
        _run(session, 2)
    assert len(session.steps) == 2 and session.close() is False


def test_the_spool_keeps_the_newest_steps_by_when_they_were_recorded_not_when_spilled(unreachable, tmp_path):
    """The sending thread may spill a batch that failed after the agent's thread spilled newer
    steps from a full queue: the spool still drops the oldest recorded, not the last written."""
    from ctxeng.sdk._recorder import _Entry, _order

    recorder = sdk.Recorder(unreachable, "token", spool_dir=tmp_path, max_spool=1)
    try:
        older, newer = (_Entry(key=f"run/step-{n}", tenant="t", run_id="run", order=_order(), body="{}") for n in (1, 2))
        recorder._spill([newer])
        recorder._spill([older])  # written last, recorded first
        assert [path.name for path in tmp_path.glob("*.step")] == [f"{newer.order}.step"]
        assert recorder.status["dropped"] == 1
    finally:
        recorder.close(timeout=0)


@pytest.fixture
def busy():
    """A service that answers every batch 429 with `Retry-After: 20`, as the web tier does when
    the tenant's large requests are at their bound (ctxeng.server.large_requests)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            raw = json.dumps({"errors": ["body: ... (CTXENG_LARGE_REQUESTS_MAX_PER_TENANT); retry in 20 s"]}).encode()
            self.send_response(429)
            self.send_header("Content-Type", "application/json")
            self.send_header("Retry-After", "20")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_429_is_not_sent_again_before_its_retry_after(busy, caplog):
    """The recorder's own backoff (0.5 to 1 s after a first failure) gives way to the service's
    Retry-After: the batch waits 20 s, and is kept, not dropped."""
    import logging
    import time

    caplog.set_level(logging.INFO, logger="ctxeng.sdk._recorder")
    recorder = sdk.Recorder(busy, "t")
    try:
        session = sdk.Session("chat-agent", principal=PRINCIPAL, run_id="run-busy", record=recorder)
        _run(session, 1)
        deadline = time.monotonic() + 60
        while not any("retrying in" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "the recorder never backed off"
            time.sleep(0.05)
        [waited] = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
        assert waited.endswith("retrying in 20.0 s") and "RateLimited" not in waited
        assert recorder.status["pending"] == 1 and recorder.status["dropped"] == 0
    finally:
        recorder.close(timeout=0)


def test_the_backoff_doubles_its_bound_with_each_failure_up_to_the_cap(monkeypatch, caplog):
    """Full jitter: after n failures in a row the wait is drawn from retry_base up to
    retry_base * 2**n, never more than retry_cap. Each draw here takes its upper bound."""
    import logging

    from ctxeng.sdk import _recorder

    monkeypatch.setattr(_recorder.random, "uniform", lambda low, high: high)
    caplog.set_level(logging.INFO, logger="ctxeng.sdk._recorder")
    recorder = sdk.Recorder("http://127.0.0.1:9", "t", retry_base=1.0, retry_cap=100.0)
    try:
        for _ in range(8):
            recorder._back_off("down")
        waits = [r.getMessage().rsplit("retrying in ", 1)[1] for r in caplog.records if "retrying in" in r.getMessage()]
        assert waits == ["2.0 s", "4.0 s", "8.0 s", "16.0 s", "32.0 s", "64.0 s", "100.0 s", "100.0 s"]
    finally:
        recorder.close(timeout=0)
