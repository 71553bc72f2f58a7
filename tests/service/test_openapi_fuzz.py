"""schemathesis against the project's own OpenAPI schema: every endpoint, an agent's token.

The app runs in-process over WSGI on the test database, seeded with the worked example (a
published policy, a ready and a blocked assembly, an artifact). Every generated request — valid
and invalid bodies, odd path and query values — must get an answer that is not a 5xx and that the
schema documents: its status code, content type, headers and body. A bounded number of examples
per operation keeps the whole run well under two minutes.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

EXAMPLES = 25
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


@pytest.fixture
def fuzz_token(settings, published_policy, agent_user, submit, agent_api, example_request, example_blocked_request):
    """The agent's token, with the example's ready and blocked assemblies and an artifact stored."""
    from rest_framework.authtoken.models import Token

    settings.CTXENG_THROTTLE_AGENT = ""  # thousands of requests in seconds; throttling has its own test
    assert submit(agent_api, example_request).status_code == 202
    assert submit(agent_api, example_blocked_request).status_code == 202
    artifact = {"artifact_id": "notes", "revision": 1, "kind": "evidence", "content": "x", "writer": "agent",
                "scope": "tenant-x/project-y"}
    assert agent_api.post("/api/v1/artifacts/", artifact, format="json").status_code == 201
    return Token.objects.get(user=agent_user).key


@pytest.fixture
def wsgi_app():
    """The project's WSGI app, keeping the test's database connection open between requests
    (as Django's test client does: the handler would otherwise close it after each one)."""
    from django.core.signals import request_finished, request_started
    from django.core.wsgi import get_wsgi_application
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield get_wsgi_application()
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def _operations() -> list[tuple[str, str]]:
    from drf_spectacular.generators import SchemaGenerator

    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    return [(path, method) for path, item in sorted(paths.items()) for method in sorted(item)]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize(("path", "method"), _operations())
def test_no_request_gets_a_server_error_or_an_undocumented_response(path, method, mode, fuzz_token, wsgi_app):
    operation = schemathesis.openapi.from_wsgi("/api/schema/", wsgi_app)[path][method.upper()]
    auth = {"Authorization": f"Token {fuzz_token}"}

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case) -> None:
        response = case.call(headers={**(case.headers or {}), **auth})
        case.validate_response(response, checks=CHECKS)

    try:
        check()
    except Unsatisfiable:
        # Nothing in this operation can be made invalid (no body, only free-form strings).
        if mode is not GenerationMode.NEGATIVE:
            raise


def test_booleans_are_not_accepted_as_numbers_found_by_fuzzing(published_policy, agent_api):
    """schemathesis found `"revision": true` stored as revision "1": API bodies are strict."""
    artifact = {"artifact_id": "a", "revision": True, "kind": "k", "content": "", "writer": "w", "scope": "s"}
    response = agent_api.post("/api/v1/artifacts/", artifact, format="json")
    assert response.status_code == 400
    assert any(error.startswith("revision") for error in response.json()["errors"]), response.json()


def test_nul_characters_are_refused_by_name_found_by_fuzzing(published_policy, agent_api):
    """schemathesis found NUL in a query value reaching PostgreSQL (which cannot store it): 500."""
    response = agent_api.get("/api/v1/artifacts/?artifact_id=a%00b")
    assert response.status_code == 400
    assert response.json() == {"errors": ["'artifact_id': contains a NUL character"]}
    artifact = {"artifact_id": "a", "revision": 1, "kind": "k", "content": "x\u0000y", "writer": "w", "scope": "s"}
    response = agent_api.post("/api/v1/artifacts/", artifact, format="json")
    assert response.status_code == 400
    assert response.json() == {"errors": ["content: contains a NUL character (\\u0000)"]}
