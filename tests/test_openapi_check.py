"""The schema check every API test's client makes (tests/openapi_check.py) finds what it must:
a renamed, missing or extra key, a wrong type, an undocumented status, a non-JSON body; and lets
a conforming answer and paths outside the API through."""

from __future__ import annotations

import json

from tests.openapi_check import problems

CLOSED = {"run_id": "run-1", "tenant": "tenant-x", "closed_at": "2026-12-03T00:00:00Z", "html_url": "/runs/run-1/"}
CLOSE = "/api/v1/runs/run-1/close/"


def check(body, *, status=200, method="POST", path=CLOSE, content_type="application/json"):
    return problems(method, path, status, content_type, json.dumps(body).encode())


def test_a_conforming_answer_has_no_problem():
    assert check(CLOSED) == []
    assert check({"errors": ["run_id: no run 'x'"]}, status=404) == []


def test_a_renamed_missing_or_extra_key_is_named_with_the_operation():
    renamed = {**{k: v for k, v in CLOSED.items() if k != "tenant"}, "XXtenantXX": "tenant-x"}
    found = check(renamed)
    assert any("POST /api/v1/runs/{run_id}/close/ 200" in p and "'tenant' is a required property" in p for p in found)
    assert any("XXtenantXX" in p for p in found)  # additional properties are not allowed
    assert any("closed_at" in p for p in check({**CLOSED, "closed_at": 17}))
    assert check({"errors": "not a list"}, status=404) != []


def test_an_undocumented_status_method_or_body_kind_is_a_problem():
    [undocumented] = check(CLOSED, status=202)
    assert undocumented.startswith("POST /api/v1/runs/{run_id}/close/: status 202 is not documented (documented: 200, ")
    assert check(CLOSED, method="DELETE") == ["DELETE /api/v1/runs/{run_id}/close/: not an operation of the schema (answered 200)"]
    assert check(CLOSED, method="DELETE", status=405) == []
    assert check(CLOSED, content_type="text/html") == [
        "POST /api/v1/runs/{run_id}/close/ 200: documented as application/json, answered 'text/html'"]
    assert problems("POST", CLOSE, 200, "application/json", b"<html>")[0].startswith(
        "POST /api/v1/runs/{run_id}/close/ 200: the body is not JSON")


def test_paths_outside_the_api_and_unknown_api_paths_answered_404_are_not_checked():
    assert problems("GET", "/runs/run-1/", 200, "text/html", b"<html>") == []
    assert problems("GET", "/api/v1/nowhere/", 404, "application/json", b"{}") == []
    assert problems("GET", "/api/v1/nowhere/", 200, "application/json", b"{}") == [
        "GET /api/v1/nowhere/: no operation of the schema has this path (answered 200)"]


def test_an_answer_is_checked_against_its_own_operations_schema():
    # The diff's answer is not a run's: each path finds its own operation and status.
    diff = "/api/v1/policies/source-research/diff/"
    assert problems("GET", diff, 200, "application/json", json.dumps(CLOSED).encode()) != []
    assert problems("GET", diff, 200, "application/json", json.dumps(
        {"policy_id": "source-research", "from": 1, "to": 2, "changes": []}).encode()) == []


def test_an_id_holding_a_slash_or_odd_characters_still_finds_its_operation():
    page = {"count": 0, "next": None, "previous": None, "results": []}
    path = "/api/v1/items/item edge/ ?#%&+=;~'\"<b>é/x/decisions/"
    assert problems("GET", path, 200, "application/json", json.dumps(page).encode()) == []
    assert problems("GET", path, 200, "application/json", b'{"results": 3}') != []
    # The job's own path is not taken for its input's: the input answer is checked as an input.
    job = "/api/v1/assemblies/2b1e0c6e-0000-4000-8000-000000000000/input/"
    assert any("input/ 200" in p for p in problems("GET", job, 200, "application/json", json.dumps(CLOSED).encode()))
