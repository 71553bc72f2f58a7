"""Run only by tests/service/test_telemetry.py::test_no_opentelemetry_import_without_the_env, in a
fresh process without OTEL_* variables (pytest collects a file named on its command line even
though its name does not start with test_, so the suite never collects or skips it)."""

from __future__ import annotations

import sys

from ctxeng import telemetry


def test_an_assembly_without_the_env_imports_no_opentelemetry(submit, agent_api, published_policy, example_request,
                                                             django_capture_on_commit_callbacks):
    assert not telemetry.enabled()
    assert not [m for m in sys.modules if m.startswith("opentelemetry")], "imported before the assembly"
    from manifests.models import AssemblyJob

    job_id = submit(agent_api, example_request).json()["id"]
    assert AssemblyJob.objects.get(id=job_id).status == "ready"
    with django_capture_on_commit_callbacks(execute=True):
        reported = agent_api.post(f"/api/v1/assemblies/{job_id}/usage/", {"input_tokens": 10}, format="json")
    assert reported.status_code == 200
    assert not [m for m in sys.modules if m.startswith("opentelemetry")]
