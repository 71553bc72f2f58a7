"""OpenTelemetry: each assembly is a `ctxeng.assemble` span exported over OTLP/HTTP.

A real receiver runs in the test: an HTTP server decoding the protobuf
`ExportTraceServiceRequest` (opentelemetry-proto), as a collector does. The oracles are the
submitted request, the agent's `traceparent` and the worked example's expected decisions
(docs/examples/research-agent/expected*.json), never the manifest the engine produced.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ctxeng import telemetry

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples" / "research-agent"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
AGENT_SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{AGENT_SPAN_ID}-01"
PIPELINE = ["acquisition", "hard_gates", "ranking", "load_modes", "structure", "source_limits",
            "summary_verification", "budget", "transforms", "seal"]


class Receiver:
    """An OTLP/HTTP traces endpoint: POST /v1/traces with a protobuf ExportTraceServiceRequest."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        self.spans: list = []
        self.content_types: set[str] = set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver.content_types.add(self.headers.get("Content-Type"))
                export = ExportTraceServiceRequest()
                export.ParseFromString(raw)
                for resource_spans in export.resource_spans:
                    for scope_spans in resource_spans.scope_spans:
                        receiver.spans.extend((resource_spans.resource, span) for span in scope_spans.spans)
                body = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def wait_for(self, name: str, count: int = 1, timeout: float = 30) -> list:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            telemetry.force_flush()
            found = [span for _, span in self.spans if span.name == name]
            if len(found) >= count:
                return found
            time.sleep(0.1)
        pytest.fail(f"no {count} span(s) {name!r} within {timeout} s; got {[s.name for _, s in self.spans]}")


def attributes(span) -> dict:
    out = {}
    for kv in span.attributes:
        value = kv.value
        out[kv.key] = getattr(value, value.WhichOneof("value"))
    return out


@pytest.fixture
def receiver(monkeypatch):
    server = Receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", server.endpoint)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "ctxeng-test")
    monkeypatch.setattr(telemetry, "_state", {"pid": None, "provider": None, "tracer": None})
    yield server
    telemetry.force_flush()
    if telemetry._state["provider"] is not None:
        telemetry._state["provider"].shutdown()
    server.server.shutdown()
    server.server.server_close()


def _contents(request: dict) -> list[str]:
    """Every piece of item content in a request: candidate texts and tool arguments."""
    texts = [c["content"] for c in request["candidates"] if isinstance(c.get("content"), str)]
    texts += [json.dumps(call.get("arguments")) for call in request.get("tool_calls", [])]
    return [t for t in texts if len(t) >= 12]


def _assert_no_content(spans, request: dict) -> None:
    values = [str(v) for span in spans for v in attributes(span).values()]
    for text in _contents(request):
        probes = {text, text[:40], text[-40:]} if len(text) > 40 else {text}
        for probe in probes:
            assert not any(probe in value for value in values), f"item content in an attribute: {probe!r}"


def test_an_assembly_is_a_child_of_the_agents_span_with_a_child_per_stage(
    receiver, submit, agent_api, published_policy, example_request
):
    response = submit(agent_api, example_request, HTTP_TRACEPARENT=TRACEPARENT)
    job_id = response.json()["id"]

    [root] = receiver.wait_for("ctxeng.assemble")
    assert root.trace_id.hex() == TRACE_ID and root.parent_span_id.hex() == AGENT_SPAN_ID
    children = [span for _, span in receiver.spans if span.parent_span_id == root.span_id]
    stage_spans = [s for s in children if s.name.startswith("ctxeng.stage.")]
    assert [s.name.removeprefix("ctxeng.stage.") for s in sorted(stage_spans, key=lambda s: s.start_time_unix_nano)] \
        == PIPELINE
    assert {s.name for s in children} - {s.name for s in stage_spans} == {"ctxeng.seal_write"}
    for child in children:
        assert child.trace_id == root.trace_id
        assert root.start_time_unix_nano <= child.start_time_unix_nano <= child.end_time_unix_nano
        assert child.end_time_unix_nano <= root.end_time_unix_nano
    ordered = sorted(stage_spans, key=lambda s: s.start_time_unix_nano)
    for before, after in zip(ordered, ordered[1:], strict=False):
        assert before.end_time_unix_nano <= after.start_time_unix_nano

    expected = json.loads((EXAMPLES / "expected.json").read_text())
    attrs = attributes(root)
    assert attrs["gen_ai.operation.name"] == "assemble_context"
    assert attrs["gen_ai.provider.name"] == example_request["model"]["provider"]
    assert attrs["gen_ai.request.model"] == example_request["model"]["name"]
    assert attrs["gen_ai.agent.id"] == example_request["principal"]["id"]
    assert attrs["gen_ai.conversation.id"] == example_request["run_id"]
    assert attrs["ctxeng.status"] == expected["status"]
    assert attrs["ctxeng.policy.id"] == example_request["policy"]["id"]
    assert attrs["ctxeng.policy.revision"] == str(example_request["policy"]["revision"])
    assert attrs["ctxeng.job.id"] == job_id
    assert attrs["ctxeng.dashboard.url"].endswith(f"/assemblies/{job_id}/")
    assert attrs["ctxeng.included.count"] == len(expected["included"])
    assert attrs["ctxeng.candidates.count"] == len(example_request["candidates"])
    assert attrs["ctxeng.included.count"] + attrs["ctxeng.excluded.count"] == len(example_request["candidates"])
    named = Counter(expected["excluded"].values())
    for reason, count in named.items():  # the named exclusions; trace items add to some reasons
        assert attrs[f"ctxeng.excluded.{reason}"] >= count
    assert sum(v for k, v in attrs.items() if k.startswith("ctxeng.excluded.") and k != "ctxeng.excluded.count") \
        == attrs["ctxeng.excluded.count"]
    for name in expected["hashes"]:
        assert attrs[f"ctxeng.{name}"].startswith("sha256:")
    partitions = {k.removeprefix("ctxeng.tokens.partition."): v for k, v in attrs.items()
                  if k.startswith("ctxeng.tokens.partition.")}
    assert partitions["background"] <= expected["budget_partitions"]["background"]["max_used"]
    assert sum(partitions.values()) == attrs["ctxeng.tokens.estimated_used"]
    [(resource, _)] = [(r, s) for r, s in receiver.spans if s.name == "ctxeng.assemble"]
    assert {kv.key: kv.value.string_value for kv in resource.attributes}["service.name"] == "ctxeng-test"
    assert receiver.content_types == {"application/x-protobuf"}
    _assert_no_content([span for _, span in receiver.spans], example_request)


def test_a_blocked_assembly_records_its_reason_and_no_hashes(
    receiver, submit, agent_api, published_policy, example_blocked_request
):
    submit(agent_api, example_blocked_request)
    [root] = receiver.wait_for("ctxeng.assemble")
    expected = json.loads((EXAMPLES / "expected-blocked.json").read_text())
    attrs = attributes(root)
    assert root.parent_span_id == b""  # no traceparent: the assembly starts its trace
    assert attrs["ctxeng.status"] == "blocked"
    assert attrs["ctxeng.blocked_reason"] == expected["blocked_reason"]
    assert attrs["ctxeng.blocked.missing_count"] == len(expected["missing"])
    assert not {"ctxeng.assembly_input_hash", "ctxeng.serialized_model_input_hash"} & set(attrs)
    _assert_no_content([span for _, span in receiver.spans], example_blocked_request)


def test_a_malformed_traceparent_starts_a_new_trace(receiver, submit, agent_api, published_policy, example_request):
    submit(agent_api, example_request, HTTP_TRACEPARENT=f"00-{'0' * 32}-{AGENT_SPAN_ID}-01")
    [root] = receiver.wait_for("ctxeng.assemble")
    assert root.parent_span_id == b""


@pytest.mark.parametrize("value, kept", [
    (TRACEPARENT, True), (TRACEPARENT.upper(), True), (f"00-{TRACE_ID}-{'0' * 16}-01", False),
    ("01-x", False), ("", False), (f"00-{TRACE_ID}-{AGENT_SPAN_ID}-01-extra", False),
])
def test_only_a_well_formed_traceparent_is_kept(value, kept):
    assert (telemetry.traceparent_header(value) is not None) is kept


def test_the_python_client_sends_the_traceparent(receiver, live_server, inline_jobs, published_policy, agent_user,
                                                example_request):
    from rest_framework.authtoken.models import Token

    from ctxeng.client import Client

    client = Client(live_server.url, Token.objects.get(user=agent_user).key)
    client.assemble(example_request, timeout=30, traceparent=TRACEPARENT)
    [root] = receiver.wait_for("ctxeng.assemble")
    assert root.trace_id.hex() == TRACE_ID and root.parent_span_id.hex() == AGENT_SPAN_ID


@pytest.mark.slow
def test_the_trace_crosses_the_queue_to_a_celery_worker(receiver, start_worker, agent_api, published_policy,
                                                       example_request):
    worker = start_worker(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint, OTEL_BSP_SCHEDULE_DELAY="50")
    response = agent_api.post("/api/v1/assemblies/", example_request, format="json", HTTP_TRACEPARENT=TRACEPARENT)
    assert response.status_code == 202
    [root] = receiver.wait_for("ctxeng.assemble", timeout=60)
    assert root.trace_id.hex() == TRACE_ID and root.parent_span_id.hex() == AGENT_SPAN_ID, worker.log()
    assert telemetry._state["provider"] is None  # the worker process exported it, not this one


PROBE = Path(__file__).with_name("probe_telemetry_unset.py")  # not a test_ file: only run from here


def test_no_opentelemetry_import_without_the_env():
    """In a fresh process (this one may have imported OTel already): an assembly imports none of it.
    Only pytest-django is loaded there: other installed pytest plugins (langsmith's, which comes
    with the benchmark's langchain-core) import OpenTelemetry themselves when pytest starts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pytest_django.plugin", "-o", "addopts=",
         str(PROBE.relative_to(ROOT))],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
