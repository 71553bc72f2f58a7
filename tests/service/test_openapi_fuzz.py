"""schemathesis against the project's own OpenAPI schema: every endpoint, every role's token, and
the stateful chains the schema's links describe.

The app runs in-process over WSGI on the test database, seeded with the worked example (a
published policy, a ready and a blocked assembly, an artifact). Every generated request — valid
and invalid bodies, odd path and query values — is sent with the token of each role in turn (agent,
reviewer, policy_editor, admin, and an outsider of another tenant) and must get an answer that is
not a 5xx and that the schema documents: its status code, content type, headers and body. The
stateful test follows the schema's OpenAPI links (a submitted assembly to its job, manifest, input
and usage; a created revision to its detail, edit, publish and diff), with half the creating
requests made valid so the chains reach real resources. Example counts are bounded and derandomized,
so the whole file runs in about a minute and CI is not flaky; `make fuzz` runs the same tests with
more examples (CTXENG_FUZZ_EXAMPLES, CTXENG_FUZZ_STATEFUL_EXAMPLES).

Coverage is checked, not assumed (issue 51: an earlier fuzz mostly met the throttle). Every
generated case is sent once with each role's token, and each answer is recorded per operation and
role. An answer *reaches* the operation when the operation's own view gave it — DRF's `Allow`
header, which every answer of an API view carries (its errors too) and a URL-resolver 404 or a
middleware's refusal does not, lists the method — and it is neither a 401 nor a 429. A 403 or a
404 is reached: it is that role's real answer (the outsider, in another tenant, is answered 404
for tenant-x's resources; a reviewer may not publish). Every throttle and rate quota a token's
request can meet is raised out of reach (`role_tokens`), so a 401 or a 429 fails at once, and an
operation that one role never reached fails its test. Each test's table of statuses per role is in
its report (`tests/fuzz_coverage.py` writes the whole run's table to pytest's temporary folder).
"""

from __future__ import annotations

import copy
import functools
import itertools
import os
from collections import Counter

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


def _examples(name: str, default: int) -> int:
    value = os.environ.get(name, "") or str(default)
    if not (value.isascii() and value.isdigit() and int(value) >= 1):
        raise ValueError(f"{name}: expected a whole number of examples >= 1, got {value!r}")
    return int(value)


# Generated cases per operation and mode, each sent with every role's token (75 requests a mode).
EXAMPLES = _examples("CTXENG_FUZZ_EXAMPLES", 15)
STATEFUL_EXAMPLES = _examples("CTXENG_FUZZ_STATEFUL_EXAMPLES", 8)
STATEFUL_STEPS = 6
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
ROLES = ("agent", "reviewer", "policy_editor", "admin", "outsider")
# Batches whose items are validated one by one (docs/api.md): `POST recorded-steps/` reads the batch
# (a malformed batch is a 400) and then each step's request and manifest on its own, so a step that
# violates the schema is refused in its result (`outcome: refused`, a 4xx `status`, `errors` naming
# the field) while the others are stored, and the batch answers 200. A negative case answered 200
# must show that refusal.
PER_ITEM_VALIDATION = {("/api/v1/recorded-steps/", "post")}
# Operations with nothing a negative case could make invalid (no body, no parameters).
NOTHING_TO_NEGATE = {("/api/v1/policies/", "get")}
SCHEMA_PATH = "/api/schema/"


@pytest.fixture
def role_tokens(settings, published_policy, agent_user, editor_user, reviewer_user, outsider_user, submit,
                agent_api, example_request, example_blocked_request):
    """A token per role, with the example's ready and blocked assemblies and an artifact stored."""
    from rest_framework.authtoken.models import Token

    from ctxeng.accounts.services import tenant_member_add

    # Thousands of requests in seconds, from every role: each limit a token's request can meet is
    # raised out of reach but left on, so its code still runs (their own tests check them; a 429
    # here fails). The token throttle counts every token user, whatever their role; the tenant
    # quotas count submits and runs. The login limits (tests/conftest.py) and django-axes see only
    # the dashboard's sign-in, which no API request passes; the long-poll caps answer at once with
    # a 200, never a 429.
    settings.CTXENG_THROTTLE_AGENT = "1000000/min"
    settings.CTXENG_QUOTA_JOBS_PER_MINUTE = settings.CTXENG_QUOTA_RUNS_PER_DAY = 10**9
    assert submit(agent_api, example_request).status_code == 202
    assert submit(agent_api, example_blocked_request).status_code == 202
    artifact = {"artifact_id": "notes", "revision": 1, "kind": "evidence", "content": "x", "writer": "agent",
                "scope": "tenant-x/project-y"}
    assert agent_api.post("/api/v1/artifacts/", artifact, format="json").status_code == 201
    admin = tenant_member_add(username="admin", tenant_slug="tenant-x", roles=["admin"])
    users = {"agent": agent_user, "reviewer": reviewer_user, "policy_editor": editor_user, "outsider": outsider_user}
    return {**{role: Token.objects.get(user=user).key for role, user in users.items()}, "admin": admin.key}


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


_SERVED: dict[str, dict] = {}


def served_schema(wsgi_app):
    """The schema as `/api/schema/` serves it, loaded by schemathesis over WSGI.

    It is built from the code alone, so it is fetched and parsed once per test worker (that took
    about a quarter of this file's time); each test gets its own copy, bound to its own app."""
    if "document" not in _SERVED:
        _SERVED["document"] = schemathesis.openapi.from_wsgi(SCHEMA_PATH, wsgi_app).raw_schema
    schema = schemathesis.openapi.from_dict(copy.deepcopy(_SERVED["document"]))
    schema.app, schema.location = wsgi_app, SCHEMA_PATH
    return schema


def _operations() -> list[tuple[str, str]]:
    from drf_spectacular.generators import SchemaGenerator

    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    return [(path, method) for path, item in sorted(paths.items()) for method in sorted(item)]


def _modes(path: str, method: str) -> list[GenerationMode]:
    if (path, method) in NOTHING_TO_NEGATE:
        return [GenerationMode.POSITIVE]
    return [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Token {token}"}


def _fuzz(strategy, send) -> None:
    """`send(case)` for EXAMPLES cases drawn from `strategy`, the same ones every run."""

    @given(case=strategy)
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def run(case) -> None:
        send(case)

    run()


def _reached(response, method: str) -> bool:
    """The operation's own view gave this answer (see the module's docstring), not a throttle or
    the authentication in front of it."""
    allowed = {m.strip() for value in response.headers.get("allow", []) for m in value.split(",")}
    return method.upper() in allowed and response.status_code not in (401, 429)


@pytest.mark.parametrize(("path", "method"), _operations())
def test_no_request_gets_a_server_error_or_an_undocumented_response(path, method, role_tokens, wsgi_app,
                                                                     record_property):
    operation = served_schema(wsgi_app)[path][method.upper()]
    statuses = {role: Counter() for role in ROLES}
    reached = Counter()

    def check(case, mode: GenerationMode) -> None:
        for role in ROLES:
            response = case.call(headers={**(case.headers or {}), **_auth(role_tokens[role])})
            statuses[role][response.status_code] += 1
            reached[role] += _reached(response, method)
            assert response.status_code not in (401, 429), (role, response.status_code, response.text[:300])
            if mode is GenerationMode.NEGATIVE and (path, method) in PER_ITEM_VALIDATION \
                    and response.status_code == 200:
                # The batch was read; the violation is inside a step, which the service refuses alone.
                refused = [r for r in response.json()["results"] if r["outcome"] == "refused"]
                assert any(400 <= r["status"] < 500 and r["errors"] for r in refused), response.text
                case.validate_response(response, checks=[c for c in CHECKS if c is not negative_data_rejection])
            else:
                case.validate_response(response, checks=CHECKS)

    for mode in _modes(path, method):
        _fuzz(operation.as_strategy(generation_mode=mode), functools.partial(check, mode=mode))
    record_property("openapi_fuzz", {"operation": f"{method.upper()} {path}",
                                     "statuses": {role: dict(statuses[role]) for role in ROLES},
                                     "reached": dict(reached)})
    never = [role for role in ROLES if not reached[role]]
    assert not never, f"{method.upper()} {path} never reached for {never}: {statuses}"


@pytest.mark.parametrize(("path", "method"), sorted(NOTHING_TO_NEGATE))
def test_an_operation_listed_as_having_nothing_to_negate_really_has_none(path, method, wsgi_app):
    """Keeps NOTHING_TO_NEGATE honest: once such an operation gains a parameter or a body, this
    fails and the negative fuzzing of it must be switched on."""
    operation = served_schema(wsgi_app)[path][method.upper()]

    @given(case=operation.as_strategy(generation_mode=GenerationMode.NEGATIVE))
    @settings(max_examples=1, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case) -> None:
        pass

    with pytest.raises(Unsatisfiable):
        check()


@pytest.mark.parametrize("role", ROLES)
def test_stateful_chains_along_the_schema_links_get_no_server_error(
    role, role_tokens, wsgi_app, example_request, example_policy_body
):
    schema = served_schema(wsgi_app)
    token = role_tokens[role]
    valid = itertools.count()
    steps = itertools.count()

    class Workflow(schema.as_state_machine()):
        def before_call(self, case) -> None:
            # Every other creating request is a valid one, so the links lead to real resources.
            next(steps)
            if case.method == "POST" and case.path == "/api/v1/assemblies/" and next(valid) % 2 == 0:
                case.body = {**copy.deepcopy(example_request), "step_id": f"stateful-{next(valid)}"}
            elif case.method == "POST" and case.path == "/api/v1/policies/{policy_id}/revisions/" \
                    and next(valid) % 2 == 0:
                body = copy.deepcopy(example_policy_body)
                body["policy"]["revision"] = 100 + next(valid)
                case.path_parameters = {"policy_id": body["policy"]["id"]}
                case.body = {"body": body}

        def get_call_kwargs(self, case) -> dict:
            return {"headers": {**(case.headers or {}), **_auth(token)}}

        def validate_response(self, response, case, additional_checks=None, **kwargs) -> None:
            assert response.status_code not in (401, 429), (role, case.method, case.path, response.status_code)
            case.validate_response(response, checks=CHECKS[:-1])

    Workflow.run(settings=settings(max_examples=STATEFUL_EXAMPLES, stateful_step_count=STATEFUL_STEPS,
                                   deadline=None, derandomize=True, database=None,
                                   suppress_health_check=list(HealthCheck)))
    assert next(steps) > STATEFUL_EXAMPLES


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


def _issue_30_attacks(request: dict, run_id: str) -> list[tuple[str, str, bytes | None, str]]:
    """(method, url, body, content type): what the attack of issue 30 sent, which the generators
    above do not reach (hypothesis draws no lone surrogates, and keys never repeat)."""
    import json

    def body(mutate) -> bytes:
        changed = copy.deepcopy(request)
        mutate(changed)
        return json.dumps(changed).encode()  # ensure_ascii: "\ud800" travels as its JSON escape

    def calls_same_seq(b):
        b["tool_calls"][1]["completed_seq"] = b["tool_calls"][0]["completed_seq"]

    submit = "/api/v1/assemblies/"
    return [
        ("POST", submit, body(lambda b: b["candidates"][12].update(content="\ud800")), "application/json"),
        ("POST", submit, body(lambda b: b["candidates"][12]["source_ref"].update({"\ud800": 1})), "application/json"),
        ("POST", submit, body(lambda b: b["tool_calls"][0]["arguments"].update(q="\udfff")), "application/json"),
        ("POST", submit, body(lambda b: b["model"].update(context_limit=True)), "application/json"),
        ("POST", submit, body(lambda b: b["model"].update(context_limit=1)), "application/json"),
        ("POST", submit, body(lambda b: b["model"].update(context_limit=2999)), "application/json"),
        ("POST", submit, body(lambda b: b.update(run_id="h2-ctl-\u0001run")), "application/json"),
        ("POST", submit, body(lambda b: b.update(run_id="h2-\u2028run")), "application/json"),
        ("POST", submit, body(calls_same_seq), "application/json"),
        ("POST", submit, b'{"run_id": "a", "run_id": "b"}', "application/json"),
        ("POST", submit, json.dumps(request).encode(), "application/json; charset=latin-1"),
        ("POST", submit, json.dumps(request).encode("utf-16"), "application/json"),
        ("POST", "/api/v1/artifacts/", b'{"artifact_id": "a", "revision": 1, "kind": "k", "content": "\\ud800", '
                                       b'"writer": "w", "scope": "s"}', "application/json"),
        ("POST", "/api/v1/policies/source-research/revisions/3/publish/", b'{"note": "\\ud800"}', "application/json"),
        ("GET", "/api/v1/policies/source-research/diff/?from=%C2%B2&to=3", None, ""),
        ("GET", "/api/v1/policies/source-research/diff/?from=99999999999999999999999&to=3", None, ""),
        ("GET", "/api/v1/assemblies/?limit=999999999999999999999", None, ""),
        ("GET", "/api/v1/assemblies/?offset=999999999999999999999", None, ""),
        ("GET", "/api/v1/artifacts/?limit=999999999999999999999", None, ""),
        ("GET", "/api/v1/items/task-goal/decisions/?limit=999999999999999999999", None, ""),
        ("GET", f"/api/v1/assemblies/?run_id={run_id}%E2%80%A8", None, ""),
        ("POST", "/api/v1/runs/h2-ctl-%E2%80%A8run/close/", b"{}", "application/json"),
    ]


@pytest.mark.parametrize("role", ROLES)
def test_the_requests_that_broke_issue_30_get_a_4xx_with_every_role(role, role_tokens, example_request):
    """Issue 30's attack, request by request, with every role's token: a 4xx, in JSON, never a 5xx."""
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {role_tokens[role]}")
    for method, url, body, content_type in _issue_30_attacks(example_request, example_request["run_id"]):
        if method == "GET":
            response = client.get(url)
        else:
            response = client.generic(method, url, body or b"", content_type=content_type)
        assert 400 <= response.status_code < 500, (role, method, url, response.status_code, response.content[:300])
        assert response["Content-Type"].startswith("application/json") and response.json()["errors"], (role, url)
