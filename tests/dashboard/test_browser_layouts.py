"""Reviewer dashboard III (issue 29) in headless Chromium: the inspector at 1280×720 in one
viewport, a region URL opened directly as a full page whose long lines wrap, timestamps in the
browser's zone when the user picks it, no page wider than a 390 px phone over a crawl of the
worked example (with the nav folded behind "Menu"), Validate landing at the top of its panel, and
the one-time token's copy button. Screenshots go to the test's temporary folder; `make
screenshots` (CTXENG_SCREENSHOTS) also copies the README's two from here to docs/screenshots/.
"""

from __future__ import annotations

import os
import shutil
from collections import deque
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qsl, urlparse

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from rest_framework.authtoken.models import Token

from manifests.models import Manifest
from manifests.selectors import manifest_document
from policies.services import impact_preview_start

from .conftest import reveal
from .test_browser import OUT_OF_VIEW_JS, _expected_texts

pytestmark = pytest.mark.slow

# The README's screenshots from this module (test_browser.py saves the other three).
README_SHOTS = {"inspector-1280x720.png", "phone-run.png"}


def screenshot(page, folder: Path, name: str) -> None:
    """Save `name` in the test's folder, and a README one in CTXENG_SCREENSHOTS when that is set."""
    page.screenshot(path=str(folder / name))
    refresh = os.environ.get("CTXENG_SCREENSHOTS")
    if refresh and name in README_SHOTS:
        Path(refresh).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder / name, Path(refresh) / name)


CONTRACT_ITEMS = ["summary-checkpoint-19", "result-call-c", "plan-42-r4", "summary-lossy"]

# Bounding boxes of the parts of an item's story the issue names, each a selector of #inspector.
STORY_PARTS = {
    "decision": "#inspector h2 .decision",
    "gates": "#inspector ul.gate-strip",
    "partition": "#inspector dd.partition",
    "share": "#inspector dd.tokens",
    "lineage": "#inspector .lineage-panel",
    "assertions": "#inspector .transforms-panel",
}
BOXES_JS = """
(parts) => Object.fromEntries(Object.entries(parts).map(([name, selector]) => {
  const e = document.querySelector(selector);
  if (!e) return [name, null];
  const r = e.getBoundingClientRect();
  return [name, {top: r.top, bottom: r.bottom, left: r.left, right: r.right, height: r.height}];
}))
"""


def test_the_inspector_at_1280x720_keeps_an_items_story_in_the_first_viewport(signed_in, live_server, tmp_path):
    example, open_page = signed_in
    page = open_page(1280, 720)
    job = example["ready"]
    document = manifest_document(Manifest.objects.get(job=job))
    for item_id in CONTRACT_ITEMS:
        page.goto(f"{live_server.url}/assemblies/{job.id}/?item={item_id}")
        page.wait_for_load_state("networkidle")
        assert page.evaluate("window.scrollY") == 0
        boxes = page.evaluate(BOXES_JS, STORY_PARTS)
        for name, box in boxes.items():
            if box is None and name == "decision":
                continue  # an excluded item's decision is its reason badge, checked by the texts below
            assert box is not None and box["height"] > 0, (item_id, name)
            assert 0 <= box["top"] and box["bottom"] <= 720 and box["right"] <= 1280, (item_id, name, box)
        assert page.evaluate(OUT_OF_VIEW_JS, _expected_texts(document, item_id)) == [], item_id
        page.screenshot(path=str(tmp_path / f"inspector-{item_id}-1280x720.png"))
    page.goto(f"{live_server.url}/assemblies/{job.id}/?item=result-call-c")
    page.wait_for_selector("#item-excerpts .log-context")
    screenshot(page, tmp_path, "inspector-1280x720.png")
    # the budget bar is one click away, and the page without a selected item opens with it
    assert not page.locator("#overview .budget-bar").is_visible()
    page.click("#overview summary")
    assert page.locator("#overview .budget-bar").is_visible()
    page.goto(f"{live_server.url}/assemblies/{job.id}/")
    assert page.locator("#overview .budget-bar").is_visible()


def test_a_region_url_opened_directly_renders_a_full_page_whose_long_lines_wrap(signed_in, live_server, tmp_path):
    example, open_page = signed_in
    page = open_page(1280, 800)
    job = example["ready"].id
    for url in (f"/assemblies/{job}/item/?item_id=trace-old-1", f"/assemblies/{job}/transforms/",
                f"/assemblies/{job}/item/?item_id=result-call-c&part=excerpts"):
        assert page.goto(live_server.url + url).status == 200
        assert page.locator("nav.mainnav").is_visible(), url
        assert page.evaluate("getComputedStyle(document.querySelector('header.topbar')).display") == "flex", url
        assert page.evaluate("document.documentElement.scrollWidth") <= 1280, url
    page.goto(f"{live_server.url}/assemblies/{job}/item/?item_id=trace-old-1")
    page.screenshot(path=str(tmp_path / "region-page-trace.png"))
    page.locator("a", has_text="the item in the inspector").click()
    page.wait_for_url("**?item=trace-old-1")
    assert "trace-old-1" in page.locator("#inspector h2").inner_text()


def test_times_show_in_the_browsers_zone_once_the_user_picks_it(signed_in, live_server, tmp_path):
    example, open_page = signed_in
    page = open_page(1280, 800)
    page.context.new_cdp_session(page).send("Emulation.setTimezoneOverride", {"timezoneId": "Asia/Tokyo"})
    page.goto(f"{live_server.url}/runs/run-42/")
    first = page.locator("time").first
    machine = first.get_attribute("datetime")
    utc = datetime.strptime(machine, "%Y-%m-%dT%H:%M:%SZ")
    assert first.inner_text() == utc.strftime("%Y-%m-%d %H:%M:%S UTC")
    page.click("button[name=time_display][value=local]")
    page.wait_for_selector("html[data-time-display=local]")
    tokyo = (utc + timedelta(hours=9)).strftime("%Y-%m-%d %H:%M:%S")  # Japan keeps no summer time
    shown = page.locator(f'time[datetime="{machine}"]').first
    assert shown.inner_text() == f"{tokyo} GMT+9"
    assert shown.get_attribute("title") == utc.strftime("%Y-%m-%d %H:%M:%S UTC")
    page.screenshot(path=str(tmp_path / "times-local.png"))
    page.click("button[name=time_display][value=utc]")
    page.wait_for_selector("html[data-time-display=utc]")
    assert page.locator(f'time[datetime="{machine}"]').first.inner_text().endswith(" UTC")


# --------------------------------------------------------------------------- 390 px

# Dashboard routes a crawl does not open as a page: POST-only actions, auth, the API and admin.
NOT_PAGES = {"tenant-switch", "time-display", "login", "logout", "set-password", "healthz", "favicon",
             "policy-revision-new", "policy-revision-impact-run", "policy-revision-impact-cancel",
             "policy-revision-publish", "person-role", "person-token", "person-token-revoke", "person-password-link",
             "api-schema", "api-docs",
             # downloads, not pages (their files are parsed in tests/dashboard/test_exports.py and test_compare_runs.py)
             "assembly-export", "run-timeline-export", "why-export", "compare-export",
             "policy-revision-impact-export"}  # tests/dashboard/test_impact_listing.py


def dashboard_route_names() -> set[str]:
    """The named routes of the URL conf outside /api/ and /admin/ (what every page of the crawl covers)."""
    names: set[str] = set()

    def walk(patterns, prefix: str) -> None:
        for entry in patterns:
            if isinstance(entry, URLResolver):
                route = prefix + str(entry.pattern)
                if not route.startswith(("api/", "admin/")):
                    walk(entry.url_patterns, route)
            elif isinstance(entry, URLPattern) and entry.name and not (prefix + str(entry.pattern)).startswith(("api/", "admin/")):
                names.add(entry.name)

    walk(get_resolver().url_patterns, "")
    return names - NOT_PAGES


def seeds(example) -> list[str]:
    """Pages the links do not reach on their own: regions (htmx loads them), the other sections."""
    job = example["ready"].id
    return ["/", f"/assemblies/{job}/transforms/", f"/assemblies/{job}/tool_pairs/", f"/assemblies/{job}/input/",
            f"/assemblies/{job}/item/?item_id=trace-old-1", f"/assemblies/{job}/item/?item_id=result-call-c&part=excerpts",
            f"/assemblies/{job}/item/?item_id=result-call-a&part=payload", f"/assemblies/{job}/included/",
            f"/compare/?a={job}&b={example['blocked'].id}", "/compare/?by=step&run=run-42&run_b=run-42", "/why/?q=plan",
            # the run page's regions (htmx loads them when scrolled to)
            "/runs/run-42/matrix/", "/runs/run-42/window/",
            # search within a run, with hits (the run page's form submits it through htmx)
            "/runs/run-42/search/?q=plan"]


def crawl_key(url: str) -> tuple[str, tuple[str, ...]]:
    """One page per path and set of query keys: `?item=a` and `?item=b` lay out alike."""
    parsed = urlparse(url)
    return parsed.path, tuple(sorted({key for key, _ in parse_qsl(parsed.query)}))


LINKS_JS = "() => [...document.querySelectorAll('a[href]:not([download])')].map(a => a.href)"  # a download is no page


class Crawl:
    """A breadth-first walk of the dashboard's own links from `start`, one page per `crawl_key`
    (at most `limit`), skipping /api/, /admin/, /static/ and anything that is not a 200 HTML page.
    Iterating it opens each page in `page` (loaded, regions settled) and yields its path and query;
    afterwards `seen` holds the keys opened and `routes` the URL names reached."""

    def __init__(self, page, base_url: str, start: list[str], limit: int = 80) -> None:
        self.page, self.base, self.limit = page, base_url, limit
        self.queue = deque(base_url + url for url in start)
        self.seen: set[tuple[str, tuple[str, ...]]] = set()
        self.routes: set[str] = set()

    def __iter__(self):
        host = urlparse(self.base).netloc
        while self.queue and len(self.seen) < self.limit:
            url = self.queue.popleft()
            parsed = urlparse(url)
            if parsed.netloc != host or parsed.path.startswith(("/api/", "/admin/", "/static/")) or crawl_key(url) in self.seen:
                continue
            self.seen.add(crawl_key(url))
            response = self.page.goto(url)
            if response is None or response.status != 200 or not response.headers.get("content-type", "").startswith("text/html"):
                continue
            self.page.wait_for_load_state("networkidle")
            self.routes.add(resolve(parsed.path).url_name)
            yield parsed.path + ("?" + parsed.query if parsed.query else "")
            self.queue.extend(link.split("#")[0] for link in self.page.evaluate(LINKS_JS))
WIDEST_JS = """
() => [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
  .filter(e => !e.closest('.card, .panel, table, .log-context, pre'))
  .slice(0, 5).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))
"""


def test_no_page_of_the_crawl_overflows_sideways_at_390_px(signed_in, live_server, tmp_path):
    example, open_page = signed_in
    preview = impact_preview_start(revision=example["draft"], user=example["owner"], draft=None)
    page = open_page(390, 844)
    preview_url = f"/policies/source-research/revisions/4/impact/{preview.id}/"
    crawl = Crawl(page, live_server.url, [*seeds(example), preview_url])
    wide: dict[str, object] = {}
    for opened in crawl:
        width = page.evaluate("document.documentElement.scrollWidth")
        if width > 390:
            wide[opened] = (width, page.evaluate(WIDEST_JS))
    assert wide == {}
    assert dashboard_route_names() - crawl.routes == set()  # the crawl opened every page of the URL conf
    assert len(crawl.seen) >= 25


def test_the_nav_folds_behind_menu_on_a_phone(signed_in, live_server, tmp_path):
    example, open_page = signed_in
    page = open_page(390, 844)
    page.goto(f"{live_server.url}/assemblies/{example['ready'].id}/?item=result-call-c")
    assert not page.locator("nav.mainnav").is_visible()
    # stacked, the selected item's story comes first, its list below
    assert page.locator("#inspector").bounding_box()["y"] < page.locator("#items").bounding_box()["y"]
    page.screenshot(path=str(tmp_path / "phone-inspector.png"))
    page.click("label.nav-toggle-label")
    nav = page.locator("nav.mainnav")
    assert nav.is_visible()
    for link in nav.locator("a").all():
        box = link.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390, link.inner_text()
    page.screenshot(path=str(tmp_path / "phone-menu.png"))
    nav.locator("a", has_text="Runs").click()
    page.wait_for_url("**/runs/")
    # a table wider than the phone scrolls inside its own box, not the page
    page.goto(f"{live_server.url}/runs/run-42/")
    reveal(page, "#item-timeline")
    table = page.locator("#item-timeline table").first
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert table.evaluate("t => { let e = t; while (e && e !== document.body) { const s = getComputedStyle(e);"
                          " if (e.scrollWidth > e.clientWidth && ['auto', 'scroll'].includes(s.overflowX)) return true;"
                          " e = e.parentElement; } return t.scrollWidth <= t.clientWidth; }")
    screenshot(page, tmp_path, "phone-run.png")


def test_validate_lands_at_the_top_of_the_error_panel(signed_in, live_server, tmp_path):
    example, open_page = signed_in
    page = open_page(1280, 720)
    page.goto(f"{live_server.url}/policies/source-research/revisions/4/edit/")
    page.fill("#policy-body", "policy:\n  id: source-research\n  revision: 4\nbudget: [unclosed\n")
    page.locator("button[value=validate]").scroll_into_view_if_needed()
    assert page.evaluate("window.scrollY") > 0
    page.click("button[value=validate]")
    page.wait_for_selector("#validation .field-errors")
    # the panel's top edge comes to the top of the window (below the page's 72 px scroll padding)
    page.wait_for_function("() => { const top = document.querySelector('#validation').getBoundingClientRect().top;"
                           " return top >= 0 && top <= 80; }")
    page.screenshot(path=str(tmp_path / "validate-errors.png"))


def test_the_copy_button_puts_the_one_time_token_on_the_clipboard(signed_in, live_server):
    example, open_page = signed_in
    page = open_page(1280, 800)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    Token.objects.filter(user=example["reviewer"]).delete()
    page.goto(f"{live_server.url}/people/")
    page.locator(f"form[action='/people/{example['reviewer'].pk}/token/'] button").click()
    page.wait_for_selector("#token-value")
    token = page.locator("#token-value").inner_text()
    page.click("#new-token button.copy")
    page.wait_for_selector("#new-token button.copy:text('copied')")
    assert page.evaluate("navigator.clipboard.readText()") == token


def test_the_crawl_key_treats_pages_that_differ_only_in_values_as_one():
    assert crawl_key("http://x/a/?item=1&page=2") == crawl_key("http://x/a/?page=9&item=zz")
    assert crawl_key("http://x/a/?item=1") != crawl_key("http://x/a/") != crawl_key("http://x/b/")
