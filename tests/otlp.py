"""Real OTLP trace receivers on loopback, as a collector runs them, for the telemetry tests.

- `HttpReceiver`: OTLP/HTTP, `POST /v1/traces` with a protobuf `ExportTraceServiceRequest`.
- `GrpcReceiver`: OTLP/gRPC, the collector's `TraceService/Export` (grpcio with the service
  stubs of opentelemetry-proto).

Both decode what arrives into `spans`, (resource, span) pairs of the protobuf messages, and answer
as a collector does. `wait_for` flushes this process's provider (ctxeng.telemetry) while it waits,
so spans from this process and from a subprocess that flushes before exiting are both seen.
"""

from __future__ import annotations

import gzip
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

PIPELINE = ["acquisition", "hard_gates", "ranking", "load_modes", "structure", "source_limits",
            "summary_verification", "budget", "transforms", "seal"]


class _Receiver:
    protocol = ""

    def __init__(self) -> None:
        self.spans: list = []
        self._lock = threading.Lock()

    def _add(self, export) -> None:
        with self._lock:
            for resource_spans in export.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    self.spans.extend((resource_spans.resource, span) for span in scope_spans.spans)

    def named(self, name: str) -> list:
        with self._lock:
            return [span for _, span in self.spans if span.name == name]

    def wait_for(self, name: str, count: int = 1, timeout: float = 30) -> list:
        from ctxeng import telemetry

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            telemetry.force_flush()
            found = self.named(name)
            if len(found) >= count:
                return found
            time.sleep(0.1)
        pytest.fail(f"no {count} span(s) {name!r} within {timeout} s; got {[s.name for _, s in self.spans]}")

    def children_of(self, span) -> list:
        with self._lock:
            return [s for _, s in self.spans if s.parent_span_id == span.span_id and s.trace_id == span.trace_id]


class HttpReceiver(_Receiver):
    """An OTLP/HTTP traces endpoint: POST /v1/traces with a protobuf ExportTraceServiceRequest."""

    protocol = "http/protobuf"

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        super().__init__()
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
                receiver._add(export)
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

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class GrpcReceiver(_Receiver):
    """An OTLP/gRPC traces endpoint: the collector's opentelemetry.proto TraceService."""

    protocol = "grpc"

    def __init__(self) -> None:
        from concurrent import futures

        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

        super().__init__()
        receiver = self

        class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):  # noqa: N802 - the service's name
                receiver._add(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceService(), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"  # http: the exporter's plaintext channel

    def close(self) -> None:
        self.server.stop(grace=None)


RECEIVERS = {"http/protobuf": HttpReceiver, "grpc": GrpcReceiver}


def attributes(span) -> dict:
    out = {}
    for kv in span.attributes:
        value = kv.value
        out[kv.key] = getattr(value, value.WhichOneof("value"))
    return out


def traced_to(monkeypatch, receiver: _Receiver) -> None:
    """Point this process's OTel environment at `receiver` and start from a fresh provider."""
    from ctxeng import telemetry

    for name in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SDK_DISABLED",
                 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "TRACEPARENT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", receiver.protocol)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "ctxeng-test")
    monkeypatch.setattr(telemetry, "_state", {"pid": None, "provider": None, "tracer": None, "ids": None})
    monkeypatch.setattr(telemetry, "_said", set())


def shut_down(receiver: _Receiver) -> None:
    from ctxeng import telemetry

    telemetry.force_flush()
    if telemetry._state["provider"] is not None:
        telemetry._state["provider"].shutdown()
    receiver.close()


@pytest.fixture(params=sorted(RECEIVERS))
def receiver(request, monkeypatch):
    """A real receiver of each protocol, with this process's OTel variables pointing at it (a plugin
    of tests/conftest.py; a module that wants a bare receiver defines its own)."""
    server = RECEIVERS[request.param]()
    traced_to(monkeypatch, server)
    yield server
    shut_down(server)
