"""Headless Chromium (the Debian package, driven by playwright) against a live server.

The manifest inspector's URL contract at 1440×900 and 1920×1080 (what a reviewer sees without
scrolling), no horizontal overflow at 1280 px and wider, search and filters kept in the URL (Back
works), the payload view's links between blocks and items, the run timeline, and the policy impact
page. Screenshots go to the test's temporary folder; `make screenshots` sets CTXENG_SCREENSHOTS to
refresh the README's copies in docs/screenshots/. No browser is downloaded: a missing
/usr/bin/chromium fails the test (CI installs it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from manifests.examples import example_json
from manifests.models import Manifest
from manifests.selectors import manifest_document

from .conftest import reveal

SIZES = [(1440, 900), (1920, 1080)]
# Items of the worked example that show each part of the story: a summary of three turns, a tool
# result cut to its failures, a stale revision with a refresh condition, a summary whose assertions failed.
CONTRACT_ITEMS = ["summary-checkpoint-19", "result-call-c", "plan-42-r4", "summary-lossy"]

pytestmark = pytest.mark.slow

# The texts of #inspector that are not fully inside the viewport (or not shown at all), each as
# "text: why"; an element counts when its own text contains the wanted text.
OUT_OF_VIEW_JS = """
(wanted) => {
  const panel = document.querySelector('#inspector');
  const elements = [...panel.querySelectorAll('*')];
  const missing = [];
  for (const text of wanted) {
    const holders = elements.filter(e => e.textContent.includes(text) && ![...e.children].some(c => c.textContent.includes(text)));
    if (!holders.length) { missing.push(text + ': not shown'); continue; }
    const visible = holders.some(e => {
      const r = e.getBoundingClientRect();
      return r.width > 0 && r.top >= 0 && r.left >= 0 && r.bottom <= window.innerHeight && r.right <= window.innerWidth;
    });
    if (!visible) missing.push(text + ': outside the viewport');
  }
  return missing;
}
"""

# Elements wider than their box: the document, and every card, panel and table on the page.
OVERFLOW_JS = """
() => {
  const out = [];
  if (document.documentElement.scrollWidth > window.innerWidth) out.push('document ' + document.documentElement.scrollWidth);
  for (const e of document.querySelectorAll('.card, .panel, table')) {
    if (e.scrollWidth > e.clientWidth + 1) out.push((e.id || e.className || e.tagName) + ' ' + e.scrollWidth + '>' + e.clientWidth);
    const r = e.getBoundingClientRect();
    if (r.right > window.innerWidth + 1) out.push((e.id || e.className || e.tagName) + ' ends at ' + r.right);
  }
  return out;
}
"""


# The screenshots the README shows; `make screenshots` copies these (only) to docs/screenshots/.
README_SHOTS = {"manifest.png", "run-timeline.png", "policy-impact.png"}


@pytest.fixture
def shots(tmp_path):
    """Save a screenshot in the test's temporary folder, and a README one in CTXENG_SCREENSHOTS when set."""
    refresh = os.environ.get("CTXENG_SCREENSHOTS")

    def save(page, name: str, *, full_page: bool = False) -> Path:
        path = tmp_path / name
        page.screenshot(path=str(path), full_page=full_page)
        if refresh and name in README_SHOTS:
            Path(refresh).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, Path(refresh) / name)
        return path

    return save


@pytest.fixture
def logged_in(signed_in):
    """(example, a function opening a page logged in as the owner at a viewport size)."""
    return signed_in


def _expected_texts(document: dict, item_id: str) -> list[str]:
    """What the URL contract says a reviewer sees of `item_id`, read off the sealed document."""
    record = next((r for r in document["included"] if r["item_id"] == item_id), None)
    texts = ["included"] if record is not None else []
    if record is None:
        record = next(r for r in document["excluded"] if r["item_id"] == item_id)
        texts.append(record["reason"])
    texts += [f"{gate} {'✓✗·–'[['passed', 'failed', 'not_evaluated', 'not_applicable'].index(result)]} {result}"
              for gate, result in record["hard_gate_results"].items()]
    texts.append(record.get("partition") or "no partition")
    texts.append(str(record["tokens"]))
    texts += [node["node_id"] for node in record.get("source_lineage") or []]
    touching = [t for t in document["transforms"] if t["output_item_id"] == item_id or item_id in t["input_item_ids"]]
    texts += [i for t in touching for i in t["input_item_ids"]]
    texts += [f"{name} {status}" for t in touching for name, status in t["preservation_assertions"].items()]
    return texts


@pytest.mark.parametrize("width,height", SIZES)
def test_the_inspector_shows_an_items_whole_story_without_scrolling(logged_in, live_server, shots, width, height):
    example, open_page = logged_in
    page = open_page(width, height)
    job = example["ready"]
    document = manifest_document(Manifest.objects.get(job=job))
    for item_id in CONTRACT_ITEMS:
        page.goto(f"{live_server.url}/assemblies/{job.id}/?item={item_id}")
        assert page.evaluate("window.scrollY") == 0
        wanted = _expected_texts(document, item_id)
        assert len(wanted) > 9, wanted
        assert page.evaluate(OUT_OF_VIEW_JS, wanted) == [], item_id
        page.wait_for_load_state("networkidle")  # the payload place and excerpts load on their own
        assert page.evaluate(OUT_OF_VIEW_JS, wanted) == [], item_id
        assert page.evaluate(OVERFLOW_JS) == [], item_id
        shots(page, f"inspector-{item_id}-{width}x{height}.png")
    # the summary's lineage lists its three input turns, never "its own source"
    page.goto(f"{live_server.url}/assemblies/{job.id}/?item=summary-checkpoint-19")
    lineage = page.locator(".lineage-panel").inner_text()
    assert all(turn in lineage for turn in ("turn-17", "turn-18", "turn-19")) and "own source" not in lineage


def test_no_panel_overflows_at_1280_px(logged_in, live_server, shots):
    example, open_page = logged_in
    page = open_page(1280, 800)
    for url in (f"/assemblies/{example['ready'].id}/?item=result-call-c", f"/assemblies/{example['blocked'].id}/",
                f"/assemblies/{example['ready'].id}/?item=summary-lossy&group=zone", "/runs/run-42/",
                f"/assemblies/{example['ready'].id}/input/?item=result-call-a"):
        assert page.goto(live_server.url + url).status == 200, url
        for _ in range(3):  # the lower regions load as they are scrolled to
            page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
            page.wait_for_load_state("networkidle")
        assert page.evaluate(OVERFLOW_JS) == [], url
    page.goto(f"{live_server.url}/assemblies/{example['ready'].id}/")
    # Each region replaces itself when revealed, and revealing one can reveal its neighbour: a
    # locator resolved before that swap may be detached mid-scroll, so the page scrolls by selector.
    for region, loaded in (("#tool-pairs", "#tool-pairs table"), ("#transforms", "#transforms article.transform")):
        page.evaluate("selector => document.querySelector(selector).scrollIntoView()", region)
        page.wait_for_selector(loaded)
    assert page.evaluate(OVERFLOW_JS) == []
    shots(page, "manifest-lower-sections-1280.png")
    page.goto(f"{live_server.url}/assemblies/{example['blocked'].id}/")
    shots(page, "manifest-blocked-1280.png")


def test_search_and_filters_live_in_the_url_and_back_restores_them(logged_in, live_server, shots):
    example, open_page = logged_in
    page = open_page()
    base = f"{live_server.url}/assemblies/{example['ready'].id}/"
    page.goto(base)
    page.fill("#items input[name=q]", "trace-old")
    page.press("#items input[name=q]", "Enter")
    page.wait_for_url("**q=trace-old**")
    listed = page.locator("#items td.item-cell code").all_inner_texts()
    assert listed == [f"trace-old-{n}" for n in range(1, 6)]
    page.select_option("#items select[name=group]", "partition")
    page.click("#items button[type=submit]")
    page.wait_for_url("**group=partition**")
    assert parse_qs(urlparse(page.url).query) == {"q": ["trace-old"], "group": ["partition"]}
    page.locator("#items a", has_text="trace-old-3").click()
    page.wait_for_url("**item=trace-old-3**")
    assert "trace-old-3" in page.locator("#inspector h2").inner_text()
    assert page.locator("#items tr.focus").inner_text().startswith("trace-old-3")
    shots(page, "inspector-search.png")
    page.go_back()
    page.wait_for_url(lambda url: "item=" not in url)
    assert page.locator("#inspector h2").inner_text() == "Select an item"
    page.go_back()
    page.wait_for_url(lambda url: "group=partition" not in url)
    assert page.locator("#items input[name=q]").input_value() == "trace-old"
    assert page.locator("#items select[name=group]").input_value() == "reason"
    # a count in the overview filters the list; a bad value gets a visible message, never an error page
    page.goto(base)
    page.locator("#overview a.chip", has_text="stale_revision").click()
    page.wait_for_url("**reason=stale_revision**")
    assert sorted(page.locator("#items td.item-cell code").all_inner_texts()) == ["evidence-pi-old-commit", "plan-42-r4"]
    page.goto(base + "?decision=maybe&group=%3Cb%3E&item=nope")
    problems = page.locator(".problems").inner_text()
    assert "Unknown decision" in problems and "Unknown grouping" in problems and "no item" in problems
    assert page.locator("#items td.item-cell").count() == len(example_json("expected.json")["included"]) + 14


def test_the_payload_links_each_block_to_its_item_and_back(logged_in, live_server, shots):
    example, open_page = logged_in
    page = open_page()
    page.goto(f"{live_server.url}/assemblies/{example['ready'].id}/?item=result-call-a")
    place = page.locator(".payload-place").inner_text()
    assert "message 4" in place and "untrusted_data" in place
    assert "call in message 3" in page.locator("#inspector").inner_text()
    page.locator(".payload-place a", has_text="open its block").click()
    page.wait_for_url("**/input/**")
    block = page.locator("li.segment.focus")
    assert block.count() == 1 and "result-call-a" in block.inner_text()
    shots(page, "payload.png")
    block.locator("a", has_text="result-call-a").click()
    page.wait_for_url("**item=result-call-a**")
    assert "result-call-a" in page.locator("#inspector h2").inner_text()


def test_the_run_timeline_shows_each_item_across_steps_and_opens_a_steps_inspector(logged_in, live_server, shots):
    example, open_page = logged_in
    page = open_page(1440, 900)
    page.goto(f"{live_server.url}/runs/run-42/")
    reveal(page, "#item-timeline")
    header = page.locator("#item-timeline thead").inner_text()
    steps = [job.step_id for job in sorted((example["ready"], example["blocked"], example["hostile"]), key=lambda j: j.created_at)]
    assert [step for step in steps if step in header] == steps
    row = page.locator("#item-timeline tbody tr", has_text="plan-42-r4").first
    assert row.inner_text().count("stale_revision") == 3  # out at every step, for the same reason
    shots(page, "run-timeline.png")
    page.check("#item-timeline input[name=changed]")
    page.locator("#item-timeline button", has_text="Show").click()
    page.wait_for_selector("#item-timeline h2:has-text('whose decision changed')")
    # Every step here decides alike on the candidates it shares; only a candidate the blocked
    # request leaves out (the open items summary) changes along the run.
    ids = {name: {c["item_id"] for c in example_json(name)["candidates"]} for name in ("request.json", "request-blocked.json")}
    changed = page.locator("#item-timeline tbody th.item-col code").all_inner_texts()
    assert changed == sorted(ids["request.json"] ^ ids["request-blocked.json"]) and "open-items" in changed
    row = page.locator("#item-timeline tbody tr", has_text="open-items").first
    assert "—" in row.inner_text()
    row.locator("td.step-cell a").last.click()
    page.wait_for_url("**item=open-items**")
    assert str(example["hostile"].id) in page.url
    assert "open-items" in page.locator("#inspector h2").inner_text()


def test_a_reviewer_sees_the_inspector_and_the_impact_preview_in_a_browser(logged_in, live_server, shots):
    example, open_page = logged_in
    page = open_page(1440, 900)
    page.goto(f"{live_server.url}/assemblies/{example['ready'].id}/?item=summary-checkpoint-19")
    page.wait_for_selector("#item-payload .payload-place")  # the regions htmx loads
    page.wait_for_selector("#item-excerpts pre")
    shots(page, "manifest.png")
    page.goto(f"{live_server.url}/policies/source-research/revisions/4/impact/")
    assert "budget.partitions.background.maximum" in page.locator("table.diff").inner_text()
    page.click("#run-impact")  # a POST; htmx swaps in the region, which polls until the job is done
    page.wait_for_selector("#impact .preview-status .badge:text-is('done')")  # the job ended (it polls till then)
    impact = page.locator("#impact").inner_text()
    assert "would flip" in impact and "web-context7-overview" in impact
    shots(page, "policy-impact.png")
