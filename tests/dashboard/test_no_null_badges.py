"""No page shows a badge reading "null", "None" or nothing (SQLite reads a JSON null out of a
manifest as the text 'null'; a missing value must leave the badge out, not print it)."""

from __future__ import annotations

import re

BADGE = re.compile(r'<span class="badge[^"]*"[^>]*>(.*?)</span>', re.DOTALL)


def test_no_badge_reads_null_or_none_or_nothing(owner_client, example, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        owner_client.post("/policies/source-research/revisions/4/impact/run/")
    pages = ["/", "/runs/", f"/runs/{example['ready'].run.run_id}/", "/why/?q=web", "/policies/",
             "/policies/source-research/", "/policies/source-research/diff/",
             "/policies/source-research/revisions/4/edit/", "/policies/source-research/revisions/4/impact/",
             *(f"/assemblies/{example[name].id}/" for name in ("ready", "blocked", "hostile"))]
    for page in pages:
        response = owner_client.get(page)
        assert response.status_code == 200, page
        texts = [re.sub(r"<[^>]+>", "", t).strip() for t in BADGE.findall(response.content.decode())]
        assert texts, page
        bad = [t for t in texts if t.lower() in ("", "null", "none")]
        assert not bad, f"{page}: badges {bad}"
