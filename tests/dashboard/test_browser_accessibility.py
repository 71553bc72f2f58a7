"""Accessibility (issues 41, 52): axe-core in headless Chromium on every dashboard page — 0 critical
and 0 serious violations, at 1280×720 and at 390 px.

axe-core is vendored (static/vendor/axe-core-<version>.min.js, from the npm registry) but no page
links it: the test evaluates its source in the page through the browser driver (DevTools evaluation
is not subject to the page's CSP, which allows only the site's own scripts). The pages are those of
the 390 px crawl (every named route of the URL conf, through the links of the worked example and
its seeds), plus the login page and the pages only a form reaches (a policy draft's editor with a
YAML error shown, a run's step matrix and why-excluded filters), a 200-step run's page and the
impact page of a preview that replayed all 200 of its steps (its first and second pages).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.db import transaction

from manifests.models import AssemblyJob
from policies import dashboard_selectors
from policies.models import ImpactPreview, PreviewStatus
from policies.services import impact_preview_start

from .long_run import long_run
from .test_browser_layouts import Crawl, dashboard_route_names, seeds

pytestmark = pytest.mark.slow

AXE = next((Path(__file__).resolve().parents[2] / "static" / "vendor").glob("axe-core-*.min.js"))
# Only what is serious or critical fails the test; the rest (moderate, minor) is reported by axe
# and kept in the failure message of any run that fails for a serious one.
BLOCKING = ("critical", "serious")
RUN_AXE_JS = """
async () => {
  const result = await axe.run(document, {resultTypes: ['violations']});
  return result.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 3).map(n => n.target.join(' ') + ' — ' + (n.failureSummary || '').split('\\n').slice(0, 2).join(' '))}));
}
"""


def violations_of(page) -> list[dict]:
    """axe-core's serious and critical violations on the page as it stands."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text(encoding="utf-8"))
    return [v for v in page.evaluate(RUN_AXE_JS) if v["impact"] in BLOCKING]


def test_the_axe_core_file_is_vendored_and_no_page_links_it(client):
    text = AXE.read_text(encoding="utf-8")
    assert text.startswith(f"/*! axe v{AXE.name.removeprefix('axe-core-').removesuffix('.min.js')}")
    for template in (Path(__file__).resolve().parents[2] / "templates").rglob("*.html"):
        assert "axe-core" not in template.read_text(encoding="utf-8"), template


def test_the_login_page_has_no_serious_violation(live_server, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        page.goto(f"{live_server.url}/login/")
        assert violations_of(page) == []
    finally:
        page.close()


def big_preview(example) -> str:
    """A 200-step run (tests/dashboard/long_run.py) and a preview of revision 4 replaying all of it
    (200 requests, each changed by the draft): the impact page's URL."""
    sources = list(AssemblyJob.objects.filter(run__run_id="run-42", manifest__isnull=False).order_by("created_at"))
    long_run(sources, steps=200, run_id="run-long")
    with transaction.atomic():  # started as the page starts one; run on the in-process thread once committed
        preview = impact_preview_start(revision=example["draft"], user=example["owner"], draft=None,
                                       selection={"runs": ["run-long"], "limit": 200})
    deadline = time.monotonic() + 300
    while (preview := ImpactPreview.objects.get(pk=preview.pk)).active:
        assert time.monotonic() < deadline, preview
        time.sleep(0.5)
    assert preview.status == PreviewStatus.DONE and preview.done >= 200, preview.error
    return f"/policies/source-research/revisions/4/impact/{preview.id}/"


@pytest.mark.parametrize("width, height", [(1280, 720), (390, 844)], ids=["1280px", "390px"])
def test_every_dashboard_page_has_no_serious_or_critical_violation(signed_in, live_server, width, height):
    example, open_page = signed_in
    preview = impact_preview_start(revision=example["draft"], user=example["owner"], draft=None)
    page = open_page(width, height)
    extra = [f"/policies/source-research/revisions/4/impact/{preview.id}/",
             "/runs/run-42/matrix/?q=plan&sort=excluded", "/why/?q=plan&reason=stale_revision&group=none"]
    crawl = Crawl(page, live_server.url, [*seeds(example), *extra])
    found: dict[str, list[dict]] = {}
    for opened in crawl:
        if problems := violations_of(page):
            found[opened] = problems
    # the editor with a YAML error in its panel (a page state only a form reaches)
    page.goto(f"{live_server.url}/policies/source-research/revisions/4/edit/")
    page.fill("#policy-body", "policy:\n  id: source-research\n  revision: 4\nbudget: [unclosed\n")
    page.click("button[value=validate]")
    page.wait_for_selector("#validation .field-errors")
    if problems := violations_of(page):
        found["editor with a YAML error"] = problems
    assert dashboard_route_names() - crawl.routes == set()
    assert len(crawl.seen) >= 25
    # After the crawl (whose 80 pages its 200 step links would fill): a long run, and the impact
    # page after a preview that replayed all of it, opened directly.
    preview_url = big_preview(example)
    for url in ("/runs/run-long/", "/policies/source-research/revisions/4/impact/", preview_url, preview_url + "?page=2",
                "/policies/source-research/diff/?from=3&to=4"):
        page.goto(live_server.url + url)
        page.wait_for_load_state("networkidle")
        if problems := violations_of(page):
            found[url] = problems
        if url.startswith(preview_url):  # a full page of rows, each with its two tables
            assert page.locator("#impact article.impact-row").count() == dashboard_selectors.IMPACT_ROWS_PER_PAGE
    assert found == {}


MARKED_JS = """() => [...document.querySelectorAll('[data-scroll-focus]')].map(e => ({
  id: e.id || e.parentElement.id || e.tagName, tabindex: e.getAttribute('tabindex'),
  overflows: e.scrollWidth > e.clientWidth + 1 || e.scrollHeight > e.clientHeight + 1,
  focusable_inside: !!e.querySelector('a[href], button, input, select, textarea, summary, [tabindex]')}))"""
NEXT_FRAMES_JS = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


def test_a_box_that_scrolls_only_on_a_phone_is_focusable_only_there(signed_in, live_server):
    """static/ctxeng/scroll-focus.js: a box that scrolls and holds nothing focusable gets
    tabindex="0" at the width where it scrolls, and loses it where it no longer does."""
    example, open_page = signed_in
    page = open_page(390, 844)
    page.goto(f"{live_server.url}/assemblies/{example['ready'].id}/")
    page.wait_for_load_state("networkidle")
    marked = page.evaluate(MARKED_JS)
    assert any(m["id"] == "acquisition" for m in marked), marked  # its table is wider than a phone
    assert all(m["tabindex"] == "0" and m["overflows"] and not m["focusable_inside"] for m in marked), marked
    page.set_viewport_size({"width": 1280, "height": 800})
    page.evaluate(NEXT_FRAMES_JS)
    wide = page.evaluate(MARKED_JS)
    assert all(m["overflows"] for m in wide) and not any(m["id"] == "acquisition" for m in wide), wide
