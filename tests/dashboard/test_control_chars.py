"""NUL and other control characters in a URL are a 400 on every path, dashboard included.

Before, only /api/ was covered: `%00` in a dashboard query string reached PostgreSQL (which
cannot compare text holding NUL) and came back as a 500.
"""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("url", [
    "/runs/?policy=source%00research",
    "/runs/?status=ready&since=2026-01-01%00",
    "/why/?q=plan-42%00",
    "/runs/run%0042/",
    "/policies/source%00research/",
    "/runs/?policy=source%1bresearch",
    "/why/?q=plan%0A42",
    "/why/?q%00=plan",
])
def test_a_dashboard_url_with_a_control_character_is_an_html_400(owner_client, url):
    response = owner_client.get(url)
    assert response.status_code == 400, url
    assert response["Content-Type"].startswith("text/html")
    assert "Bad request" in response.content.decode()
    assert "script-src 'self'" in response["Content-Security-Policy"]


def test_the_400_page_names_the_parameter_and_the_character(owner_client):
    body = owner_client.get("/runs/?policy=a%1bb").content.decode()
    assert "&#x27;policy&#x27;: contains a control character (U+001B)" in body
    assert "path: contains a NUL character" in owner_client.get("/runs/a%00/").content.decode()


def test_an_anonymous_request_is_refused_the_same_way(client):
    assert client.get("/login/?next=/%00").status_code == 400
    assert client.get("/static/ctxeng/app%00.css").status_code == 400


@pytest.mark.parametrize("url", ["/api/v1/assemblies/?run_id=run%0042", "/api/v1/policies/?x=%07",
                                 "/api/v1/items/plan%00/decisions/"])
def test_an_api_url_with_a_control_character_is_a_json_400(agent_api, url):
    response = agent_api.get(url)
    assert response.status_code == 400, url
    assert "contains" in response.json()["errors"][0]


def test_a_dashboard_form_field_holding_nul_is_refused_before_it_is_stored(owner_client, example):
    response = owner_client.post("/policies/source-research/revisions/4/publish/", {"note": "smaller\x00background"})
    assert response.status_code == 400
    example["draft"].refresh_from_db()
    assert example["draft"].status == "draft"


def test_ordinary_urls_and_form_text_with_newlines_still_work(owner_client, example):
    assert owner_client.get("/runs/?policy=source-research&status=ready").status_code == 200
    assert owner_client.get("/why/?q=plan-42-r4").status_code == 200
    response = owner_client.post("/policies/source-research/revisions/4/publish/", {"note": "line one\r\nline two\tend"})
    assert response.status_code == 302
