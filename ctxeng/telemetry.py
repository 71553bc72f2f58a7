"""OpenTelemetry traces of assemblies and of their reported usage, switched on by the standard OTel
environment.

Contract:

- `enabled()`: `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set and
  `OTEL_SDK_DISABLED` is not `true`. Otherwise nothing here imports `opentelemetry` (tests check
  `sys.modules` after an assembly in the service, the CLI and the SDK), so a process without a
  collector pays nothing.
- `protocol()`: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else `OTEL_EXPORTER_OTLP_PROTOCOL`, else
  `http/protobuf` (the OTLP exporter spec's default). `grpc` uses the OTLP/gRPC exporter (the
  `otel-grpc` extra). `http/json` (OpenTelemetry Python has no OTLP/JSON exporter), an unknown
  value, or `grpc` without its exporter raise `ConfigurationError`, whose message names the
  variable and the fix: a process never sends protobuf to a port that expects something else.
  `check()` is that test for the entry points: the web logs it at start (ManifestsConfig.ready)
  and records no spans; a worker refuses to start (manifests.worker_startup); the CLI refuses to
  assemble (exit 2); the SDK logs it once and runs on without spans.
- `record_assembly(...)` emits, for one sealed job, a span `ctxeng.assemble` (kind INTERNAL) from
  the claim's start to the commit, with one child span per pipeline stage (`ctxeng.stage.<name>`,
  timed by the engine's `AssemblyResult.stage_timings`) and one for the database write
  (`ctxeng.seal_write`). With a W3C `traceparent` from the submit (the REST header or the
  client's `traceparent=`), stored on the job and passed with the task, the span is a child of
  the agent's span; without one it starts a trace.
- A job's assembly span has a derived identity (`job_traceparent`): its span id, and without a
  submitted traceparent its trace id, are hashes of the job id. So `record_usage`, called when
  the usage is reported (`POST assemblies/{id}/usage/`), needs only the job and its stored
  traceparent to make its `ctxeng.usage` span a child of the assembly span.
- `record_local_assembly(...)` emits the same assembly and stage spans for an assembly in this
  process (the CLI, the SDK's local mode; the parent is the span the agent has open, else
  `TRACEPARENT` in the environment, as the OTel environment-carrier convention names it) and
  returns the assembly span's traceparent for the step's later `record_local_usage`. Without OpenTelemetry installed (the light
  install) it says once which extra to install and records nothing.
- Spans go to the OTLP exporter of `protocol()`, configured by the standard variables
  (`OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`, `_HEADERS`, `_TIMEOUT`, `_INSECURE` for gRPC;
  `OTEL_SERVICE_NAME`, default `ctxeng`; `OTEL_RESOURCE_ATTRIBUTES`) through a batch processor,
  one provider per process (a forked worker builds its own).
- Attributes are identities, counts, hashes and token figures. No content of any item (text,
  tool arguments, excerpts, gate details that quote a value) is ever an attribute.

GenAI semantic conventions (development status, v1.37+): `gen_ai.operation.name` is
`assemble_context` (no predefined value fits: the span prepares a model input, it calls no
model), `gen_ai.provider.name` and `gen_ai.request.model` from the request's model,
`gen_ai.request.max_tokens` where the adapter sets it (Anthropic), `gen_ai.agent.id` the
principal, `gen_ai.conversation.id` the run; the usage span carries `gen_ai.usage.input_tokens`,
`gen_ai.usage.output_tokens` and `gen_ai.usage.cache_read.input_tokens` (the cached part, which
the input figure includes). OpenInference (Phoenix, Arize): every ctxeng span is
`openinference.span.kind=CHAIN`, "a link between application steps": the assembly feeds the
agent's model call, and its stages are steps of it (none is a retriever, a reranker or a model
call in OpenInference's sense). The usage span carries no `llm.token_count.*`: the agent's own
LLM span, where it has one, already counts those tokens.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import time
from collections import Counter
from importlib import metadata
from typing import Any

SPAN_NAME = "ctxeng.assemble"
USAGE_SPAN_NAME = "ctxeng.usage"
OPERATION = "assemble_context"
OPENINFERENCE_KIND = "CHAIN"
DEFAULT_PROTOCOL = "http/protobuf"
INSTALL_HINT = "pip install '.[otel]' in a ctxeng checkout"
GRPC_INSTALL_HINT = "pip install '.[otel-grpc]' in a ctxeng checkout"
_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_PROTOCOL_VARS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
_GRPC_DISTRIBUTION = "opentelemetry-exporter-otlp-proto-grpc"

_TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_state: dict[str, Any] = {"pid": None, "provider": None, "tracer": None, "ids": None}
_said: set[str] = set()  # what this process has logged once


class ConfigurationError(Exception):
    """The OTel environment asks for an export ctxeng cannot make; the message names the variable
    and the fix."""


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


def protocol() -> str:
    """The OTLP protocol the environment asks for; ConfigurationError when it cannot be honoured."""
    for name in _PROTOCOL_VARS:
        value = os.environ.get(name, "").strip()
        if value:
            break
    else:
        return DEFAULT_PROTOCOL
    if value == DEFAULT_PROTOCOL:
        return value
    if value == "grpc":
        try:
            metadata.distribution(_GRPC_DISTRIBUTION)
        except metadata.PackageNotFoundError:
            raise ConfigurationError(
                f"{name}=grpc needs the OTLP/gRPC exporter: {GRPC_INSTALL_HINT}, or set {name}=http/protobuf "
                f"with the collector's OTLP/HTTP endpoint (port 4318)"
            ) from None
        return value
    if value == "http/json":
        raise ConfigurationError(
            f"{name}=http/json is not supported (OpenTelemetry Python has no OTLP/JSON exporter): set "
            f"{name}=http/protobuf (the collector's port 4318) or grpc (port 4317, {GRPC_INSTALL_HINT})"
        )
    raise ConfigurationError(
        f"{name}={value!r} is not an OTLP protocol: set {name}=http/protobuf (the default) or grpc"
    )


def check() -> None:
    """Raise ConfigurationError when traces are on and their protocol cannot be honoured (the
    entry points call it at start; see the module docstring for what each does with it)."""
    if enabled():
        protocol()


def check_at_start() -> None:
    """The web's start check: log a configuration error at once, never raise (the API and the
    dashboard keep serving; every later span is refused by the same check, so none is sent)."""
    try:
        check()
    except ConfigurationError as exc:
        _say_once(logging.ERROR, f"OpenTelemetry traces are off: {exc}")


def _say_once(level: int, message: str) -> None:
    if message not in _said:
        _said.add(message)
        logger.log(level, "%s", message)


def _exporter(chosen: str) -> Any:
    if chosen == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    return OTLPSpanExporter()


def _tracer() -> Any:
    """The process's tracer, built on first use (and again in a forked child)."""
    with _lock:
        if _state["pid"] != os.getpid():
            chosen = protocol()
            from opentelemetry.sdk.resources import SERVICE_NAME, Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

            class ChosenIds(RandomIdGenerator):
                """Random ids, except those `_emit_assembly` sets for the next span of this thread."""

                def __init__(self) -> None:
                    self.next = threading.local()

                def generate_trace_id(self) -> int:
                    chosen = getattr(self.next, "trace_id", None)
                    return chosen if chosen else super().generate_trace_id()

                def generate_span_id(self) -> int:
                    chosen = getattr(self.next, "span_id", None)
                    return chosen if chosen else super().generate_span_id()

            resource = Resource.create()
            if not os.environ.get("OTEL_SERVICE_NAME") and resource.attributes.get(SERVICE_NAME, "").startswith(
                "unknown_service"
            ):
                resource = resource.merge(Resource({SERVICE_NAME: "ctxeng"}))
            ids = ChosenIds()
            provider = TracerProvider(resource=resource, id_generator=ids)
            provider.add_span_processor(BatchSpanProcessor(_exporter(chosen)))
            _state.update(pid=os.getpid(), provider=provider, tracer=provider.get_tracer("ctxeng"), ids=ids)
        return _state["tracer"]


def force_flush(timeout_millis: int = 10_000) -> bool:
    """Export the spans still buffered in this process (tests, the CLI before it exits; a worker's
    shutdown does it too)."""
    provider = _state["provider"]
    return True if provider is None else provider.force_flush(timeout_millis)


def parent_context(traceparent: str | None) -> Any:
    if not traceparent:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": traceparent})


def job_traceparent(job_id: str, submitted: str | None) -> str:
    """The W3C traceparent of job `job_id`'s assembly span: its trace is the submitted
    traceparent's, or (none submitted) one derived from the job id; its span id is derived from
    the job id. The job id is a random UUID, so the derived ids are as random as generated ones."""
    digest = hashlib.sha256(f"ctxeng.assemble/{job_id}".encode()).digest()
    span_id = w3c_id(digest[16:24])
    if submitted:
        _, trace_id, _, flags = submitted.split("-")
        return f"00-{trace_id}-{span_id}-{flags}"
    return f"00-{w3c_id(digest[:16])}-{span_id}-01"


def w3c_id(raw: bytes) -> str:
    """`raw` as a W3C trace-context id (lower-case hex, two digits a byte); all zeros, which the
    spec forbids, become the smallest valid id of the same length."""
    return raw.hex() if any(raw) else "0" * (2 * len(raw) - 1) + "1"


def _epoch_offset_ns() -> int:
    """Add to a perf_counter_ns reading to get epoch nanoseconds (spans carry wall-clock times)."""
    return time.time_ns() - time.perf_counter_ns()


def assembly_attributes(document: dict[str, Any], *, job_id: str | None, dashboard_url: str | None,
                        payload: dict[str, Any] | None) -> dict[str, Any]:
    """The span's attributes from a sealed manifest document: identities, counts, hashes, tokens."""
    assembly = document["assembly"]
    budget = document.get("budget") or {}
    excluded = document.get("excluded") or []
    attributes: dict[str, Any] = {
        "openinference.span.kind": OPENINFERENCE_KIND,
        "gen_ai.operation.name": OPERATION,
        "gen_ai.provider.name": assembly["model"]["provider"],
        "gen_ai.request.model": assembly["model"]["name"],
        "gen_ai.agent.id": assembly["principal"]["id"],
        "gen_ai.conversation.id": assembly["run_id"],
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
    }
    if job_id is not None:
        attributes["ctxeng.job.id"] = job_id
    if dashboard_url is not None:
        attributes["ctxeng.dashboard.url"] = dashboard_url
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


def _emit_assembly(*, result: Any, attributes: dict[str, Any], parent: str | None, own: str | None,
                   started_ns: int, sealed_ns: int | None, ended_ns: int) -> str:
    """The assembly span and its children; returns the assembly span's traceparent. `own`, a
    traceparent, fixes the assembly span's ids (a job's derived identity); times are
    perf_counter_ns readings of this process."""
    from opentelemetry.context import Context
    from opentelemetry.trace import SpanKind, set_span_in_context

    tracer = _tracer()
    offset = _epoch_offset_ns()
    ids = _state["ids"]
    context = parent_context(parent)
    if own:
        _, trace_id, span_id, _ = own.split("-")
        ids.next.trace_id, ids.next.span_id = int(trace_id, 16), int(span_id, 16)
        # Derived ids hold only where the parent is the one they were derived from: never a span
        # that happens to be open in this process.
        context = context or Context()
    try:
        span = tracer.start_span(SPAN_NAME, context=context, kind=SpanKind.INTERNAL,
                                 attributes=attributes, start_time=started_ns + offset)
    finally:
        ids.next.trace_id = ids.next.span_id = None
    # A blocked assembly is a decision, not an error: the span's status stays unset.
    inside = set_span_in_context(span)
    # The timings and the manifest's stage records are made from the same list (asm.stages): each
    # timed stage has its record.
    stages = {s["stage"]: s for s in result.manifest_dict()["stages"]}
    for stage, begin, end in result.stage_timings:
        record = stages[stage]
        child = tracer.start_span(f"ctxeng.stage.{stage}", context=inside, start_time=begin + offset,
                                  attributes={"openinference.span.kind": OPENINFERENCE_KIND,
                                              "ctxeng.stage.name": stage,
                                              "ctxeng.stage.seq": record["seq"],
                                              "ctxeng.stage.items_in": record["items_in"],
                                              "ctxeng.stage.items_out": record["items_out"]})
        child.end(end_time=end + offset)
    if sealed_ns is not None:
        tracer.start_span("ctxeng.seal_write", context=inside, start_time=sealed_ns + offset,
                          attributes={"openinference.span.kind": OPENINFERENCE_KIND}).end(end_time=ended_ns + offset)
    span.end(end_time=ended_ns + offset)
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


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
        document = result.manifest_dict()
        attributes = assembly_attributes(document, job_id=job_id, dashboard_url=dashboard_url,
                                         payload=result.serialized_input)
        _emit_assembly(result=result, attributes=attributes, parent=traceparent,
                       own=job_traceparent(job_id, traceparent), started_ns=started_ns, sealed_ns=sealed_ns,
                       ended_ns=ended_ns)
    except ConfigurationError as exc:
        _say_once(logging.ERROR, f"OpenTelemetry traces are off: {exc}")
    except Exception:  # noqa: BLE001 - see docstring
        logger.warning("could not record the trace of job %s", job_id, exc_info=True)


def _usable() -> bool:
    """For the CLI and the SDK: traces are on, configured, and OpenTelemetry is installed; what
    stands in the way is said once (the light install: which extra to install)."""
    if not enabled():
        return False
    try:
        if protocol() == DEFAULT_PROTOCOL:  # (grpc: protocol() found its exporter)
            metadata.distribution("opentelemetry-exporter-otlp-proto-http")
        metadata.distribution("opentelemetry-sdk")
    except ConfigurationError as exc:
        _say_once(logging.ERROR, f"OpenTelemetry traces are off: {exc}")
        return False
    except metadata.PackageNotFoundError:
        variable = next(name for name in _ENDPOINT_VARS if os.environ.get(name))
        _say_once(logging.WARNING, f"{variable} is set but OpenTelemetry is not installed: {INSTALL_HINT} "
                                   f"to export traces (continuing without them)")
        return False
    return True


def record_local_assembly(*, result: Any, started_ns: int, ended_ns: int) -> str | None:
    """Emit the spans of an assembly made in this process (the CLI, the SDK's local mode); returns
    the assembly span's traceparent (the parent of its usage span), or None when traces are off.
    The parent is the span open in this process (an agent that traces itself), else `TRACEPARENT`
    from the environment, else none. Never raises."""
    if not _usable():
        return None
    try:
        from opentelemetry import trace

        attributes = assembly_attributes(result.manifest_dict(), job_id=None, dashboard_url=None,
                                         payload=result.serialized_input)
        parent = None  # start_span's default: the current context
        if not trace.get_current_span().get_span_context().is_valid:
            parent = traceparent_header(os.environ.get("TRACEPARENT"))
        return _emit_assembly(result=result, attributes=attributes, parent=parent, own=None, started_ns=started_ns,
                              sealed_ns=None, ended_ns=ended_ns)
    except Exception:  # noqa: BLE001 - tracing must not fail an assembly
        logger.warning("could not record the trace of assembly", exc_info=True)
        return None


def usage_attributes(*, input_tokens: int, output_tokens: int, cached_tokens: int, model: dict[str, Any],
                     assembly_id: str, estimated_input_tokens: int | None, job_id: str | None = None) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "openinference.span.kind": OPENINFERENCE_KIND,
        "gen_ai.provider.name": model.get("provider") or "",
        "gen_ai.request.model": model.get("name") or "",
        "gen_ai.usage.input_tokens": input_tokens,
        "gen_ai.usage.output_tokens": output_tokens,
        "gen_ai.usage.cache_read.input_tokens": cached_tokens,
        "ctxeng.assembly.id": assembly_id,
    }
    if job_id is not None:
        attributes["ctxeng.job.id"] = job_id
    if estimated_input_tokens is not None:
        attributes["ctxeng.tokens.estimated_input"] = estimated_input_tokens
    return attributes


def record_usage(*, parent: str, attributes: dict[str, Any]) -> None:
    """Emit a `ctxeng.usage` span, a child of the assembly span `parent` (a traceparent), at the
    moment of the report. Never raises: a report is stored whether or not it is traced."""
    try:
        from opentelemetry.trace import SpanKind

        tracer = _tracer()
        now = time.time_ns()
        tracer.start_span(USAGE_SPAN_NAME, context=parent_context(parent), kind=SpanKind.INTERNAL,
                          attributes=attributes, start_time=now).end(end_time=now)
    except ConfigurationError as exc:
        _say_once(logging.ERROR, f"OpenTelemetry traces are off: {exc}")
    except Exception:  # noqa: BLE001 - see docstring
        logger.warning("could not record the usage span of assembly %s", attributes.get("ctxeng.assembly.id"),
                       exc_info=True)


def record_local_usage(*, parent: str | None, manifest: dict[str, Any], usage: dict[str, Any]) -> None:
    """`record_usage` for a step of the SDK's local mode (`usage` as `Step.usage` holds it):
    nothing when the step's assembly was not traced (`parent` None)."""
    if parent is None or not _usable():
        return
    assembly = manifest["assembly"]
    record_usage(parent=parent, attributes=usage_attributes(
        input_tokens=usage["input_tokens"], output_tokens=usage["output_tokens"], cached_tokens=usage["cached_tokens"],
        model=assembly["model"], assembly_id=assembly["id"], estimated_input_tokens=usage.get("estimated_input_tokens"),
    ))
