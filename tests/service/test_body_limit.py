"""A body over CTXENG_MAX_REQUEST_BYTES is a 413 that names its declared size and the limit
(`ctxeng.server.rest.PayloadTooLarge`), before any view reads it; one that declares no size is
refused by what Django read (tests/service/test_hardening_iii.py, through gunicorn)."""

from __future__ import annotations

import json

import pytest

from manifests.models import AssemblyJob


@pytest.mark.parametrize("over", [1, 5000])
def test_a_body_over_the_limit_is_a_413_naming_its_size_and_the_limit(settings, agent_api, example_request, over):
    body = json.dumps(example_request).encode()
    settings.CTXENG_MAX_REQUEST_BYTES = len(body) - over
    response = agent_api.post("/api/v1/assemblies/", data=body, content_type="application/json")
    assert response.status_code == 413
    assert response.json() == {"errors": [
        f"body: {len(body)} bytes exceeds the limit of {len(body) - over} bytes (CTXENG_MAX_REQUEST_BYTES)"]}
    assert not AssemblyJob.objects.exists()


def test_a_body_at_the_limit_is_read(settings, agent_api, published_policy, example_request):
    body = json.dumps(example_request).encode()
    settings.CTXENG_MAX_REQUEST_BYTES = len(body)
    response = agent_api.post("/api/v1/assemblies/", data=body, content_type="application/json")
    assert response.status_code in (201, 202), response.content[:300]
