"""`python -m ctxeng assemble` with the OpenTelemetry variables: the service's spans, from the CLI.

The CLI runs as a subprocess, exporting to a real receiver on loopback (tests/otlp.py: OTLP/HTTP
and OTLP/gRPC). The oracles are the worked example's request and expected decisions, the
`TRACEPARENT` the test sets and the engine's pipeline order, never the manifest the CLI wrote.
The light install (no OpenTelemetry at all) is a real one, built as tests/test_light_install.py
builds it; the SDK's light-install case is here too, so the two share one environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.otlp import PIPELINE, RECEIVERS, attributes

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "research-agent"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN_ID = "b7ad6b7169203331"


def _env(**otel: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("OTEL_") and k not in ("TRACEPARENT", "PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, **otel}


def _assemble(tmp_path: Path, env: dict[str, str], python: str = sys.executable) -> subprocess.CompletedProcess:
    return subprocess.run(
        [python, "-m", "ctxeng", "assemble", "--policy", str(EXAMPLE / "policy.yaml"),
         "--request", str(EXAMPLE / "request.json"), "--manifest-out", str(tmp_path / "manifest.json")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )


@pytest.fixture(params=sorted(RECEIVERS))
def receiver(request):
    server = RECEIVERS[request.param]()
    yield server
    server.close()


def test_the_cli_emits_the_assembly_span_and_a_span_per_stage_under_the_callers_span(receiver, tmp_path):
    env = _env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint, OTEL_EXPORTER_OTLP_PROTOCOL=receiver.protocol,
               TRACEPARENT=f"00-{TRACE_ID}-{CALLER_SPAN_ID}-01")
    done = _assemble(tmp_path, env)
    assert done.returncode == 0, done.stderr
    # The CLI flushed before it exited: everything is there already.
    [root] = receiver.named("ctxeng.assemble")
    assert root.trace_id.hex() == TRACE_ID and root.parent_span_id.hex() == CALLER_SPAN_ID
    stages = sorted(receiver.children_of(root), key=lambda s: s.start_time_unix_nano)
    assert [s.name for s in stages] == [f"ctxeng.stage.{name}" for name in PIPELINE]
    for before, after in zip(stages, stages[1:], strict=False):
        assert before.end_time_unix_nano <= after.start_time_unix_nano
    assert root.start_time_unix_nano <= stages[0].start_time_unix_nano
    assert stages[-1].end_time_unix_nano <= root.end_time_unix_nano

    request = json.loads((EXAMPLE / "request.json").read_text())
    expected = json.loads((EXAMPLE / "expected.json").read_text())
    attrs = attributes(root)
    assert attrs["openinference.span.kind"] == "CHAIN"
    assert {attributes(s)["openinference.span.kind"] for s in stages} == {"CHAIN"}
    assert attrs["gen_ai.operation.name"] == "assemble_context"
    assert attrs["gen_ai.provider.name"] == request["model"]["provider"]
    assert attrs["gen_ai.request.model"] == request["model"]["name"]
    assert attrs["gen_ai.conversation.id"] == request["run_id"]
    assert attrs["ctxeng.status"] == expected["status"]
    assert attrs["ctxeng.included.count"] == len(expected["included"])
    assert "ctxeng.job.id" not in attrs and "ctxeng.dashboard.url" not in attrs  # no service, no job
    [(resource, _)] = [(r, s) for r, s in receiver.spans if s.name == "ctxeng.assemble"]
    assert {kv.key: kv.value.string_value for kv in resource.attributes}["service.name"] == "ctxeng"


def test_the_cli_refuses_a_protocol_it_cannot_export_before_it_assembles(tmp_path):
    env = _env(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318", OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/json")
    done = _assemble(tmp_path, env)
    assert done.returncode == 2
    assert done.stderr.startswith("invalid: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json is not supported")
    assert "http/protobuf" in done.stderr
    assert not (tmp_path / "manifest.json").exists()


PROBE = """
import sys
from ctxeng.cli import main
code = main(sys.argv[1:])
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
print("loaded:", loaded, file=sys.stderr)
sys.exit(code if not loaded else 99)
"""


def test_without_the_variables_the_cli_imports_nothing_of_opentelemetry(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "assemble", "--policy", str(EXAMPLE / "policy.yaml"),
         "--request", str(EXAMPLE / "request.json"), "--manifest-out", str(tmp_path / "manifest.json")],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "loaded: []" in done.stderr


# --------------------------------------------------------------------------- the light install


@pytest.fixture(scope="module")
def light_venv(tmp_path_factory):
    """`pip install ctxeng-governor` without extras (tests/test_light_install.py builds it the same way)."""
    from tests import test_light_install

    return test_light_install.light_venv.__wrapped__(tmp_path_factory)


@pytest.mark.slow
def test_on_the_light_install_the_cli_says_once_which_extra_traces_need_and_assembles(light_venv, tmp_path):
    env = _env(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318")
    done = _assemble(tmp_path, env, python=str(light_venv))
    assert done.returncode == 0, done.stderr
    hints = [line for line in done.stderr.splitlines() if "OpenTelemetry is not installed" in line]
    assert len(hints) == 1 and "pip install '.[otel]' in a ctxeng checkout" in hints[0]
    assert json.loads((tmp_path / "manifest.json").read_text())["assembly"]["status"] == "ready"


@pytest.mark.slow
def test_on_the_light_install_grpc_without_its_extra_is_refused_with_the_extra_to_install(light_venv, tmp_path):
    env = _env(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4317", OTEL_EXPORTER_OTLP_PROTOCOL="grpc")
    done = _assemble(tmp_path, env, python=str(light_venv))
    assert done.returncode == 2
    assert "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs the OTLP/gRPC exporter: pip install '.[otel-grpc]' in a ctxeng checkout" \
        in done.stderr


SDK_PROBE = """
import json, sys
from ctxeng import sdk
session = sdk.Session("chat-agent")
steps = [session.step(json.loads(sys.argv[1])) for _ in range(2)]
steps[-1].report_usage({"usage": {"prompt_tokens": 30, "completion_tokens": 2}})
sys.exit(0 if all(step.ready for step in steps) else 1)
"""


@pytest.mark.slow
def test_on_the_light_install_the_sdk_says_once_which_extra_traces_need_and_runs_on(light_venv, tmp_path):
    messages = [{"role": "user", "content": "Hello there!"}]
    done = subprocess.run([str(light_venv), "-c", SDK_PROBE, json.dumps(messages)], cwd=tmp_path,
                          env=_env(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    hints = [line for line in done.stderr.splitlines() if "OpenTelemetry is not installed" in line]
    assert len(hints) == 1 and "pip install '.[otel]' in a ctxeng checkout" in hints[0], done.stderr
