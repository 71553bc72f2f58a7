"""ctxeng.sdk local mode with the OpenTelemetry variables: the service's spans, from the agent's process.

Real receivers on loopback (tests/otlp.py: OTLP/HTTP and OTLP/gRPC). The oracles are what the test
writes: the messages' model, the usage numbers it reports, the agent's own span it opens, the
engine's pipeline order. The SDK on the light install (no OpenTelemetry at all) is tested beside
the CLI's, in tests/engine/test_cli_telemetry.py, sharing its one light environment.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from ctxeng import sdk, telemetry
from tests.otlp import PIPELINE, attributes

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "Hello there!"}]
RESPONSE = {"usage": {"prompt_tokens": 812, "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": 512}}}


def test_a_local_step_is_an_assembly_span_with_its_stages_and_its_usage_under_it(receiver):
    step = sdk.Session("chat-agent", model="gpt-4o").step(MESSAGES)
    assert step.ready
    step.report_usage(RESPONSE)

    [root] = receiver.wait_for("ctxeng.assemble")
    [usage] = receiver.wait_for("ctxeng.usage")
    stages = sorted((s for s in receiver.children_of(root) if s.name.startswith("ctxeng.stage.")),
                    key=lambda s: s.start_time_unix_nano)
    assert [s.name.removeprefix("ctxeng.stage.") for s in stages] == PIPELINE
    # Each stage span says what the manifest's stage record says: its place and the items in and out.
    recorded = {r["stage"]: r for r in step.manifest["stages"]}
    for span in stages:
        attrs, record = attributes(span), recorded[span.name.removeprefix("ctxeng.stage.")]
        assert (attrs["ctxeng.stage.seq"], attrs["ctxeng.stage.items_in"], attrs["ctxeng.stage.items_out"]) == (
            record["seq"], record["items_in"], record["items_out"]), span.name
    assert sorted(attributes(s)["ctxeng.stage.seq"] for s in stages) == list(range(1, len(PIPELINE) + 1))
    assert usage.trace_id == root.trace_id and usage.parent_span_id == root.span_id
    attrs = attributes(root)
    assert attrs["openinference.span.kind"] == "CHAIN"
    assert attrs["gen_ai.request.model"] == "gpt-4o" and attrs["gen_ai.provider.name"] == "openai"
    assert attrs["ctxeng.assembly.id"] == step.assembly_id
    used = attributes(usage)
    assert used["gen_ai.usage.input_tokens"] == 812
    assert used["gen_ai.usage.output_tokens"] == 20
    assert used["gen_ai.usage.cache_read.input_tokens"] == 512
    assert used["gen_ai.request.model"] == "gpt-4o"
    assert used["ctxeng.assembly.id"] == step.assembly_id
    assert used["ctxeng.tokens.estimated_input"] == step.usage["estimated_input_tokens"]


def test_a_step_inside_the_agents_own_span_is_its_child(receiver, monkeypatch):
    """An agent traced with OpenTelemetry (its own provider) has a span open: the step joins it,
    before a TRACEPARENT in the environment (the parent of a process that traces nothing itself)."""
    from opentelemetry.sdk.trace import TracerProvider

    monkeypatch.setenv("TRACEPARENT", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")

    agent = TracerProvider().get_tracer("agent")
    with agent.start_as_current_span("agent.turn") as turn:
        sdk.Session("chat-agent").step(MESSAGES)
    [root] = receiver.wait_for("ctxeng.assemble")
    assert root.trace_id == turn.get_span_context().trace_id.to_bytes(16, "big")
    assert root.parent_span_id == turn.get_span_context().span_id.to_bytes(8, "big")


def test_a_protocol_it_cannot_export_is_logged_once_and_the_agent_runs_on(monkeypatch, caplog):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    monkeypatch.setattr(telemetry, "_state", {"pid": None, "provider": None, "tracer": None, "ids": None})
    monkeypatch.setattr(telemetry, "_said", set())
    session = sdk.Session("chat-agent")
    with caplog.at_level(logging.WARNING, logger="ctxeng.telemetry"):
        steps = [session.step(MESSAGES), session.step(MESSAGES)]
        steps[-1].report_usage(RESPONSE)
    assert all(step.ready for step in steps)
    [record] = [r for r in caplog.records if r.name == "ctxeng.telemetry"]
    assert record.levelno == logging.ERROR
    assert "OTEL_EXPORTER_OTLP_PROTOCOL=http/json" in record.getMessage()
    assert telemetry._state["provider"] is None  # nothing was set up to send


PROBE = """
import json, sys
from ctxeng import sdk
step = sdk.Session("chat-agent").step(json.loads(sys.argv[1]))
step.report_usage(json.loads(sys.argv[2]))
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
print("loaded:", loaded, file=sys.stderr)
sys.exit(0 if step.ready and not loaded else 99)
"""


def _env(**otel: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("OTEL_") and k not in ("TRACEPARENT", "PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, **otel}


def test_without_the_variables_the_sdk_imports_nothing_of_opentelemetry(tmp_path):
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(MESSAGES), json.dumps(RESPONSE)],
                          cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "loaded: []" in done.stderr


def test_a_jobs_traceparent_is_a_w3c_header_derived_from_its_job_id():
    """The service's assembly span (telemetry.job_traceparent): the same job id gives the same ids
    (a retried job's span is the same span), another job other ids; a submitted traceparent keeps
    its trace and its flags. An all-zero id is invalid in W3C trace context: the smallest valid
    id of the same length stands for it."""
    import re

    own = telemetry.job_traceparent("job-1", None)
    assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", own)
    assert own == telemetry.job_traceparent("job-1", None)
    assert own.split("-")[1:3] != telemetry.job_traceparent("job-2", None).split("-")[1:3]
    joined = telemetry.job_traceparent("job-1", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")
    assert joined == f"00-0af7651916cd43dd8448eb211c80319c-{own.split('-')[2]}-00"
    assert telemetry.w3c_id(bytes(16)) == "0" * 31 + "1"
    assert telemetry.w3c_id(bytes(8)) == "0" * 15 + "1"
    assert telemetry.w3c_id(b"\x00\xab") == "00ab"
