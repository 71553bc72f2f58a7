"""Content-Security-Policy: every HTML page carries one that allows no inline script, and the
dashboard templates give it nothing inline to block (htmx comes from static files)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]



def _script_src(policy: str) -> str:
    return next(part.strip() for part in policy.split(";") if part.strip().startswith("script-src"))


def test_every_html_page_carries_a_csp_without_inline_script(owner_client, example):
    for url in ["/", "/login/", "/runs/", f"/assemblies/{example['ready'].id}/", "/policies/",
                f"/policies/{example['published'].policy.policy_id}/", "/api/docs/"]:
        response = owner_client.get(url)
        assert response.status_code == 200, url
        policy = response["Content-Security-Policy"]
        assert _script_src(policy) == "script-src 'self'", url
        assert "unsafe-eval" not in policy and "frame-ancestors 'none'" in policy, url


def test_the_dashboard_allows_no_inline_style_and_json_gets_no_csp(owner_client, agent_api, published_policy):
    assert "style-src 'self';" in owner_client.get("/").headers["Content-Security-Policy"]
    assert "Content-Security-Policy" not in agent_api.get("/api/v1/policies/")


def test_the_templates_have_no_inline_script_handler_or_style():
    inline_script = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I)
    handler = re.compile(r"\son[a-z]+\s*=", re.I)
    style = re.compile(r"<style|\sstyle\s*=|javascript:", re.I)
    offenders = []
    for path in sorted((REPO / "templates").rglob("*.html")):
        text = path.read_text()
        for pattern in (inline_script, handler, style):
            offenders += [f"{path.relative_to(REPO)}: {m.group(0)}" for m in pattern.finditer(text)]
    assert offenders == []


def test_htmx_is_served_from_static_files_and_told_not_to_inject_styles(owner_client):
    page = owner_client.get("/").content.decode()
    assert re.search(r'<script src="/static/django_htmx/htmx[^"]*\.js"', page)
    assert '"includeIndicatorStyles": false' in page
