"""OpenTelemetry traces of assemblies, switched on by the standard OTel environment.

Contract:

- `enabled()`: `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set and
  `OTEL_SDK_DISABLED` is not `true`. Otherwise nothing here imports `opentelemetry` (a test checks
  `sys.modules` after an assembly), so a deployment without a collector pays nothing.
- `record_assembly(...)` emits, for one sealed job, a span `ctxeng.assemble` (kind INTERNAL) from
  the claim's start to the commit, with one child span per pipeline stage (`ctxeng.stage.<name>`,
  timed by the engine's `AssemblyResult.stage_timings`) and one for the database write
  (`ctxeng.seal_write`). With a W3C `traceparent` from the submit (the REST header or the
  client's `traceparent=`), passed with the task across the queue, the span is a child of the
  agent's span; without one it starts a trace.
- Spans go to the OTLP/HTTP exporter configured by the standard variables
  (`OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`, `_HEADERS`, `_TIMEOUT`; `OTEL_SERVICE_NAME`, default
  `ctxeng`; `OTEL_RESOURCE_ATTRIBUTES`) through a batch processor, one provider per process
  (a forked worker builds its own).
- Attributes are identities, counts, hashes and token figures. No content of any item (text,
  tool arguments, excerpts, gate details that quote a value) is ever an attribute.

GenAI semantic conventions (development status, v1.37+): `gen_ai.operation.name` is
`assemble_context` (no predefined value fits: the span prepares a model input, it calls no
model), `gen_ai.provider.name` and `gen_ai.request.model` from the request's model,
`gen_ai.request.max_tokens` where the adapter sets it (Anthropic), `gen_ai.agent.id` the
principal, `gen_ai.conversation.id` the run.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import Counter
from typing import Any

SPAN_NAME = "ctxeng.assemble"
OPERATION = "assemble_context"
_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")

_TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")

_lock = threading.Lock()
_state: dict[str, Any] = {"pid": None, "provider": None, "tracer": None}


def traceparent_header(value: str | None) -> str | None:
    """A W3C `traceparent` (version 00) as sent, or None when absent or malformed (then the
    assembly starts its own trace, as the W3C spec asks of a receiver of a bad header)."""
    if value is None:
        return None
    value = value.strip().lower()
    return value if _TRACEPARENT.fullmatch(value) and value.split("-")[1] != "0" * 32 else None


def enabled() -> bool:
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(os.environ.get(name) for name in _ENDPOINT_VARS)


def _tracer() -> Any:
    """The process's tracer, built on first use (and again in a forked child)."""
    with _lock:
        if _state["pid"] != os.getpid():
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import SERVICE_NAME, Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            resource = Resource.create()
            if not os.environ.get("OTEL_SERVICE_NAME") and resource.attributes.get(SERVICE_NAME, "").startswith(
                "unknown_service"
            ):
                resource = resource.merge(Resource({SERVICE_NAME: "ctxeng"}))
            provider = TracerProvider(resource=resource)
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            _state.update(pid=os.getpid(), provider=provider, tracer=provider.get_tracer("ctxeng"))
        return _state["tracer"]


def force_flush(timeout_millis: int = 10_000) -> bool:
    """Export the spans still buffered in this process (tests; a worker's shutdown does it too)."""
    provider = _state["provider"]
    return True if provider is None else provider.force_flush(timeout_millis)


def parent_context(traceparent: str | None) -> Any:
    if not traceparent:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": traceparent})


def _epoch_offset_ns() -> int:
    """Add to a perf_counter_ns reading to get epoch nanoseconds (spans carry wall-clock times)."""
    return time.time_ns() - time.perf_counter_ns()


def assembly_attributes(document: dict[str, Any], *, job_id: str, dashboard_url: str,
                        payload: dict[str, Any] | None) -> dict[str, Any]:
    """The span's attributes from a sealed manifest document: identities, counts, hashes, tokens."""
    assembly = document["assembly"]
    budget = document.get("budget") or {}
    excluded = document.get("excluded") or []
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": OPERATION,
        "gen_ai.provider.name": assembly["model"]["provider"],
        "gen_ai.request.model": assembly["model"]["name"],
        "gen_ai.agent.id": assembly["principal"]["id"],
        "gen_ai.conversation.id": assembly["run_id"],
        "ctxeng.job.id": job_id,
        "ctxeng.assembly.id": assembly["id"],
        "ctxeng.step.id": assembly["step_id"],
        "ctxeng.tenant": assembly["principal"].get("tenant") or "",
        "ctxeng.stage": assembly["stage"],
        "ctxeng.status": assembly["status"],
        "ctxeng.policy.id": assembly["policy"]["id"],
        "ctxeng.policy.revision": str(assembly["policy"]["revision"]),
        "ctxeng.policy.digest": assembly["policy"]["digest"],
        "ctxeng.adapter": assembly["adapter"]["name"],
        "ctxeng.estimator": assembly["estimator"],
        "ctxeng.candidate_set_digest": assembly["candidate_set_digest"],
        "ctxeng.candidates.count": len(document.get("candidate_items") or []),
        "ctxeng.included.count": len(document.get("included") or []),
        "ctxeng.excluded.count": len(excluded),
        "ctxeng.transforms.count": len(document.get("transforms") or []),
        "ctxeng.tool_pairs.count": len(document.get("tool_pairs") or []),
        "ctxeng.cache.status": (document.get("cache") or {}).get("status") or "",
        "ctxeng.dashboard.url": dashboard_url,
    }
    if assembly.get("blocked_reason"):
        attributes["ctxeng.blocked_reason"] = assembly["blocked_reason"]
        attributes["ctxeng.blocked.missing_count"] = len(assembly.get("missing") or [])
    for name in ("assembly_input_hash", "serialized_model_input_hash"):
        if assembly.get(name):
            attributes[f"ctxeng.{name}"] = assembly[name]
    for reason, count in sorted(Counter(item["reason"] for item in excluded).items()):
        attributes[f"ctxeng.excluded.{reason}"] = count
    for name in ("usable_input", "estimated_used", "payload_tokens", "framing_tokens", "model_context_limit",
                 "response_reserve"):
        if budget.get(name) is not None:
            attributes[f"ctxeng.tokens.{name}"] = budget[name]
    for partition, usage in sorted((budget.get("partitions") or {}).items()):
        attributes[f"ctxeng.tokens.partition.{partition}"] = usage["used"]
    if payload and isinstance(payload.get("max_tokens"), int):
        attributes["gen_ai.request.max_tokens"] = payload["max_tokens"]
    return attributes


def record_assembly(
    *,
    job_id: str,
    result: Any,
    dashboard_url: str,
    traceparent: str | None,
    started_ns: int,
    sealed_ns: int,
    ended_ns: int,
) -> None:
    """Emit the job's spans; times are time.perf_counter_ns readings of this process.

    `started_ns` is the claimed job's start, `sealed_ns` the engine's end (the database write
    follows), `ended_ns` the commit. Never raises: tracing must not fail a sealed job.
    """
    try:
        from opentelemetry.trace import SpanKind, set_span_in_context

        tracer = _tracer()
        offset = _epoch_offset_ns()
        document = result.manifest_dict()
        attributes = assembly_attributes(document, job_id=job_id, dashboard_url=dashboard_url,
                                         payload=result.serialized_input)
        span = tracer.start_span(SPAN_NAME, context=parent_context(traceparent), kind=SpanKind.INTERNAL,
                                 attributes=attributes, start_time=started_ns + offset)
        # A blocked assembly is a decision, not an error: the span's status stays unset.
        inside = set_span_in_context(span)
        stages = {s["stage"]: s for s in document.get("stages") or []}
        for stage, begin, end in result.stage_timings:
            record = stages.get(stage) or {}
            child = tracer.start_span(f"ctxeng.stage.{stage}", context=inside, start_time=begin + offset,
                                      attributes={"ctxeng.stage.name": stage,
                                                  "ctxeng.stage.seq": record.get("seq", 0),
                                                  "ctxeng.stage.items_in": record.get("items_in", 0),
                                                  "ctxeng.stage.items_out": record.get("items_out", 0)})
            child.end(end_time=end + offset)
        tracer.start_span("ctxeng.seal_write", context=inside, start_time=sealed_ns + offset).end(
            end_time=ended_ns + offset
        )
        span.end(end_time=ended_ns + offset)
    except Exception:  # noqa: BLE001 - see docstring
        import logging

        logging.getLogger(__name__).warning("could not record the trace of job %s", job_id, exc_info=True)
