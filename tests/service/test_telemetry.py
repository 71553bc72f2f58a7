"""OpenTelemetry: each assembly is a `ctxeng.assemble` span exported over OTLP (HTTP or gRPC), and
each usage report a `ctxeng.usage` span under it.

Real receivers run in the test (tests/otlp.py): an HTTP server decoding the protobuf
`ExportTraceServiceRequest`, and a gRPC server implementing the collector's TraceService, as a
collector does. The oracles are the submitted request, the reported usage, the agent's
`traceparent` and the worked example's expected decisions (docs/examples/research-agent/expected*.json),
never the manifest the engine produced.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ctxeng import telemetry
from tests.otlp import PIPELINE, RECEIVERS, HttpReceiver, attributes, shut_down, traced_to

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples" / "research-agent"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
AGENT_SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{AGENT_SPAN_ID}-01"
USAGE = {"input_tokens": 1234, "cached_tokens": 1000, "output_tokens": 56}


@pytest.fixture
def http_receiver(monkeypatch):
    server = HttpReceiver()
    traced_to(monkeypatch, server)
    yield server
    shut_down(server)


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
    assert attrs["openinference.span.kind"] == "CHAIN"
    assert {attributes(s)["openinference.span.kind"] for s in children} == {"CHAIN"}
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
    if isinstance(receiver, HttpReceiver):
        assert receiver.content_types == {"application/x-protobuf"}
    _assert_no_content([span for _, span in receiver.spans], example_request)


def test_a_blocked_assembly_records_its_reason_and_no_hashes(
    http_receiver, submit, agent_api, published_policy, example_blocked_request
):
    submit(agent_api, example_blocked_request)
    [root] = http_receiver.wait_for("ctxeng.assemble")
    expected = json.loads((EXAMPLES / "expected-blocked.json").read_text())
    attrs = attributes(root)
    assert root.parent_span_id == b""  # no traceparent: the assembly starts its trace
    assert attrs["ctxeng.status"] == "blocked"
    assert attrs["ctxeng.blocked_reason"] == expected["blocked_reason"]
    assert attrs["ctxeng.blocked.missing_count"] == len(expected["missing"])
    assert not {"ctxeng.assembly_input_hash", "ctxeng.serialized_model_input_hash"} & set(attrs)
    _assert_no_content([span for _, span in http_receiver.spans], example_blocked_request)


def test_a_malformed_traceparent_starts_a_new_trace(http_receiver, submit, agent_api, published_policy,
                                                   example_request):
    submit(agent_api, example_request, HTTP_TRACEPARENT=f"00-{'0' * 32}-{AGENT_SPAN_ID}-01")
    [root] = http_receiver.wait_for("ctxeng.assemble")
    assert root.parent_span_id == b""


@pytest.mark.parametrize("value, kept", [
    (TRACEPARENT, True), (TRACEPARENT.upper(), True), (f"00-{TRACE_ID}-{'0' * 16}-01", False),
    ("01-x", False), ("", False), (f"00-{TRACE_ID}-{AGENT_SPAN_ID}-01-extra", False),
])
def test_only_a_well_formed_traceparent_is_kept(value, kept):
    assert (telemetry.traceparent_header(value) is not None) is kept


def test_the_python_client_sends_the_traceparent(http_receiver, live_server, inline_jobs, published_policy, agent_user,
                                                example_request):
    from rest_framework.authtoken.models import Token

    from ctxeng.client import Client

    client = Client(live_server.url, Token.objects.get(user=agent_user).key)
    client.assemble(example_request, timeout=30, traceparent=TRACEPARENT)
    [root] = http_receiver.wait_for("ctxeng.assemble")
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
    # The usage is reported to the web process (this one), which finds the worker's span from the job.
    job_id = response.json()["id"]
    assert agent_api.post(f"/api/v1/assemblies/{job_id}/usage/", USAGE, format="json").status_code == 200
    [usage] = receiver.wait_for("ctxeng.usage")
    assert usage.trace_id == root.trace_id and usage.parent_span_id == root.span_id


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


def _report(agent_api, job_id: str, capture, body: dict = USAGE):
    with capture(execute=True):
        response = agent_api.post(f"/api/v1/assemblies/{job_id}/usage/", body, format="json")
    assert response.status_code == 200, response.content
    return response


def test_a_usage_report_is_a_span_under_the_assembly_span_with_the_genai_usage(
    receiver, submit, agent_api, published_policy, example_request, django_capture_on_commit_callbacks
):
    job_id = submit(agent_api, example_request, HTTP_TRACEPARENT=TRACEPARENT).json()["id"]
    _report(agent_api, job_id, django_capture_on_commit_callbacks)
    [root] = receiver.wait_for("ctxeng.assemble")
    [usage] = receiver.wait_for("ctxeng.usage")
    assert usage.trace_id.hex() == TRACE_ID and usage.parent_span_id == root.span_id
    assert root.end_time_unix_nano <= usage.start_time_unix_nano <= usage.end_time_unix_nano
    attrs = attributes(usage)
    assert attrs["gen_ai.usage.input_tokens"] == USAGE["input_tokens"]
    assert attrs["gen_ai.usage.output_tokens"] == USAGE["output_tokens"]
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == USAGE["cached_tokens"]
    assert attrs["gen_ai.provider.name"] == example_request["model"]["provider"]
    assert attrs["gen_ai.request.model"] == example_request["model"]["name"]
    assert attrs["openinference.span.kind"] == "CHAIN"
    assert attrs["ctxeng.job.id"] == job_id
    assert attrs["ctxeng.assembly.id"] == attributes(root)["ctxeng.assembly.id"]


def test_without_a_traceparent_the_usage_span_joins_the_trace_the_assembly_started(
    http_receiver, submit, agent_api, published_policy, example_request, django_capture_on_commit_callbacks
):
    job_id = submit(agent_api, example_request).json()["id"]
    _report(agent_api, job_id, django_capture_on_commit_callbacks)
    _report(agent_api, job_id, django_capture_on_commit_callbacks, {**USAGE, "output_tokens": 99})
    [root] = http_receiver.wait_for("ctxeng.assemble")
    first, second = sorted(http_receiver.wait_for("ctxeng.usage", count=2), key=lambda s: s.start_time_unix_nano)
    assert root.parent_span_id == b""
    for usage in (first, second):  # a new report replaces the stored one; each is a span
        assert usage.trace_id == root.trace_id and usage.parent_span_id == root.span_id
    assert [attributes(u)["gen_ai.usage.output_tokens"] for u in (first, second)] == [USAGE["output_tokens"], 99]


def test_a_job_resent_without_the_traceparent_keeps_the_agents_trace(
    http_receiver, inline_jobs, agent_api, published_policy, example_request, django_capture_on_commit_callbacks
):
    """The stale-job sweep re-sends a job with no traceparent on the task; the job row has it."""
    from manifests.services import assembly_job_enqueue

    with django_capture_on_commit_callbacks(execute=False):  # the first message is lost
        response = agent_api.post("/api/v1/assemblies/", example_request, format="json", HTTP_TRACEPARENT=TRACEPARENT)
    assembly_job_enqueue(job_id=response.json()["id"])
    [root] = http_receiver.wait_for("ctxeng.assemble")
    assert root.trace_id.hex() == TRACE_ID and root.parent_span_id.hex() == AGENT_SPAN_ID


def test_the_traces_protocol_variable_overrides_the_general_one(
    monkeypatch, submit, agent_api, published_policy, example_request
):
    grpc, http = RECEIVERS["grpc"](), RECEIVERS["http/protobuf"]()
    try:
        traced_to(monkeypatch, grpc)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")  # refused, were it the one in force
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", grpc.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", http.endpoint)
        submit(agent_api, example_request)
        grpc.wait_for("ctxeng.assemble")
        assert http.spans == []
    finally:
        shut_down(grpc)
        http.close()


@pytest.mark.parametrize("variable", ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"])
@pytest.mark.parametrize("value, fix", [("http/json", "http/protobuf"), ("thrift", "http/protobuf"),
                                        ("HTTP/PROTOBUF", "http/protobuf")])
def test_a_protocol_it_cannot_export_is_refused_naming_the_variable_and_the_fix(monkeypatch, variable, value, fix):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    monkeypatch.setenv(variable, value)
    with pytest.raises(telemetry.ConfigurationError) as refused:
        telemetry.check()
    assert f"{variable}={value}" in str(refused.value).replace("'", "") and fix in str(refused.value)


@pytest.mark.parametrize("env, expected", [
    ({}, "http/protobuf"),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "grpc"),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": " http/protobuf "}, "http/protobuf"),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, "http/protobuf"),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, "grpc"),
])
def test_the_protocol_is_the_traces_variable_else_the_general_one_else_http_protobuf(monkeypatch, env, expected):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert telemetry.protocol() == expected


@pytest.mark.parametrize("variable", ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"])
def test_grpc_without_its_exporter_is_refused_naming_the_extra_and_the_http_alternative(monkeypatch, variable):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    monkeypatch.setenv(variable, "grpc")

    def not_installed(name):
        raise telemetry.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(telemetry.metadata, "distribution", not_installed)
    with pytest.raises(telemetry.ConfigurationError) as refused:
        telemetry.protocol()
    message = str(refused.value)
    assert message.startswith(f"{variable}=grpc needs the OTLP/gRPC exporter: ")
    assert telemetry.GRPC_INSTALL_HINT in message
    assert f"{variable}=http/protobuf" in message and "4318" in message


def _service_env(**otel: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "CTXENG_TEST_")) and k not in ("DATABASE_URL", "REDIS_URL")}
    return {**env, "DJANGO_SETTINGS_MODULE": "ctxeng.server.settings", "PYTHONUNBUFFERED": "1", **otel}


def test_the_web_logs_a_protocol_it_cannot_export_at_start_and_serves_on(tmp_path):
    """`manage.py check` starts Django as the web does (ManifestsConfig.ready): the error is
    logged at once, naming the variable and the fix, and the process carries on."""
    env = _service_env(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318", OTEL_EXPORTER_OTLP_PROTOCOL="http/json",
                       DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}")
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stderr.splitlines() if "OTEL_EXPORTER_OTLP_PROTOCOL" in line]
    assert "OpenTelemetry traces are off: OTEL_EXPORTER_OTLP_PROTOCOL=http/json" in line
    assert "http/protobuf" in line


@pytest.mark.slow
def test_a_worker_refuses_to_start_with_a_protocol_it_cannot_export(tmp_path):
    env = _service_env(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4317", OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="thrift",
                       DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}", REDIS_URL="redis://127.0.0.1:9/0")
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "ctxeng", "worker", "--pool", "solo", "--without-gossip",
         "--without-mingle"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    from manifests.worker_startup import EXIT_UNAVAILABLE

    assert done.returncode == EXIT_UNAVAILABLE, done.stdout[-2000:] + done.stderr[-2000:]
    assert "ctxeng worker cannot start: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='thrift' is not an OTLP protocol" \
        in done.stderr
    assert " ready." not in done.stdout + done.stderr
