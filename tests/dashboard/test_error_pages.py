"""Styled 404/403/500 pages under the CSP, with DEBUG off and on; JSON under /api/.

With DEBUG on Django would answer with its technical pages (inline styles and scripts the CSP
blocks); ctxeng.server.error_pages sends those cases to the same handlers as production.
"""

from __future__ import annotations

import re

import pytest
from django.test import Client

from policies import dashboard_selectors

DEBUG_MODES = [pytest.param(False, id="debug-off"), pytest.param(True, id="debug-on")]


@pytest.fixture(params=DEBUG_MODES)
def debug(request, settings):
    settings.DEBUG = request.param
    return request.param


def assert_styled_page(response, status: int, title: str) -> str:
    body = response.content.decode()
    assert response.status_code == status
    assert response["Content-Type"].startswith("text/html")
    assert "script-src 'self'" in response["Content-Security-Policy"]
    assert 'class="card error-page"' in body and f"<h1>{title}</h1>" in body
    assert "/static/ctxeng/app.css" in body
    # Nothing the CSP would block: no inline style or script, no event handler attribute.
    assert "<style" not in body and " style=" not in body and not re.search(r" on[a-z]+=", body)
    assert not re.search(r"<script(?![^>]*\bsrc=)", body)
    assert "Traceback" not in body and "technical" not in body.lower()
    return body


def test_an_unknown_page_is_the_styled_404(client, debug):
    body = assert_styled_page(client.get("/no-such-page/"), 404, "Not found")
    assert "<code>/no-such-page/</code>" in body


def test_a_missing_slash_still_redirects_before_any_404(client, debug):
    response = client.get("/policies")
    assert response.status_code == 301 and response["Location"] == "/policies/"


def test_an_object_a_view_cannot_find_is_the_styled_404(reviewer_client, debug):
    body = assert_styled_page(reviewer_client.get("/policies/no-such-policy/"), 404, "Not found")
    assert "tenant you are not a member of" in body
    assert "Log out" in body  # the page knows the user: the dashboard's bar is there


def test_a_missing_role_is_the_styled_403_naming_it(reviewer_client, debug):
    response = reviewer_client.post("/policies/source-research/revisions/4/publish/", {"note": "x"})
    body = assert_styled_page(response, 403, "Not allowed")
    assert "the policy_editor role is required" in body


def test_a_crash_is_the_styled_500(owner_client, monkeypatch, debug):
    def crash(**kwargs):
        raise RuntimeError("the selector broke")

    monkeypatch.setattr(dashboard_selectors, "policies_list", crash)
    owner_client.raise_request_exception = False
    body = assert_styled_page(owner_client.get("/policies/"), 500, "Server error")
    # DEBUG names the exception (the traceback goes to the log); production never does.
    assert ("RuntimeError: the selector broke" in body) is debug


@pytest.mark.parametrize("path", ["/api/v1/no-such-thing/", "/api/nothing", "/api/v1/assemblies/not-a-uuid/"])
def test_api_misses_are_json(path, debug, agent_api):
    response = agent_api.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["errors"]


def test_an_anonymous_api_miss_is_json_too(debug):
    response = Client().get("/api/v1/no-such-thing/")
    assert response.status_code == 404 and response.json() == {"errors": ["/api/v1/no-such-thing/: not found"]}
