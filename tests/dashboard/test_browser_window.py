"""Headless Chromium (playwright) on the reviewer's issue-29 views: the window tab of a generated
2,000-item manifest sorted by tokens, comparing two steps picked on the run timeline, the retired
revision badge, and downloads that parse and hold only the tenant's rows. Each page is looked at
at 1280×720 and at 390 px wide, where nothing on these pages may push the page sideways (a wide
table scrolls in its own box). Screenshots go to the test's temporary folder."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from bench import workload
from ctxeng.accounts.models import Tenant
from ctxeng.engine.hashing import sha256_text
from manifests.examples import example_json, example_text
from manifests.models import Manifest
from manifests.selectors import manifest_document
from policies.services import policy_import, policy_revision_publish

from .conftest import reveal, run_job

pytestmark = pytest.mark.slow

# What on the page's own content sticks out sideways: `main` wider than its box, or a card, box,
# form or table holder ending beyond the viewport (a table inside its box may be wider: it scrolls).
SIDEWAYS_JS = """
() => {
  const out = [];
  const main = document.querySelector('main');
  if (main.scrollWidth > main.clientWidth + 1) out.push('main ' + main.scrollWidth + '>' + main.clientWidth);
  for (const e of main.querySelectorAll('.card, .table-box, form, fieldset, nav.tabs, .downloads, h1, .title-row')) {
    const r = e.getBoundingClientRect();
    if (r.right > window.innerWidth + 1) out.push((e.id || e.className || e.tagName) + ' ends at ' + Math.round(r.right));
  }
  return out;
}
"""


def _shot(page, tmp_path: Path, name: str) -> None:
    page.screenshot(path=str(tmp_path / name), full_page=False)


def _numbers(texts: list[str]) -> list[int]:
    return [int(text.strip().removeprefix("≥").strip()) for text in texts if text.strip().removeprefix("≥").strip()]


def test_the_window_tab_finds_the_largest_items_of_a_2000_item_manifest(signed_in, live_server, tmp_path):
    example, open_page = signed_in
    body = workload.make_request(n_items=2_000, total_bytes=2_000 * 150, n_tool_pairs=40, seed=29, context_limit=16_000)
    body["policy"] = {"id": body["policy"]["id"]}
    job = run_job(example["owner"], body, "window-2000")
    document = manifest_document(Manifest.objects.get(job=job))
    assert len(document["included"]) + len(document["excluded"]) == 2_000
    page = open_page(1280, 720)
    page.goto(f"{live_server.url}/assemblies/{job.id}/")
    page.locator("nav.tabs a", has_text="Window").click()
    page.wait_for_url(f"**/assemblies/{job.id}/window/")
    _shot(page, tmp_path, "window-1280.png")
    tokens = _numbers(page.locator("#window-source tbody td:nth-child(2)").all_inner_texts())
    assert tokens and tokens == sorted(tokens, reverse=True)
    assert sum(tokens) == sum(r["tokens"] for r in document["included"])
    largest = _numbers(page.locator("#largest-items tbody td:nth-child(2)").all_inner_texts())
    assert largest[0] == max(r["tokens"] for r in document["included"])
    # the biggest source's row opens the item list filtered to it, largest first
    page.locator("#window-source tbody tr").first.locator("a").click()
    page.wait_for_url("**sort=tokens**")
    assert page.locator("select[name=sort]").input_value() == "tokens"
    listed = _numbers(page.locator("#items table.items td.num").all_inner_texts())
    assert listed == sorted(listed, reverse=True) and len(listed) == 50
    _shot(page, tmp_path, "window-list-sorted-1280.png")
    narrow = open_page(390, 844)
    narrow.goto(f"{live_server.url}/assemblies/{job.id}/window/")
    assert narrow.evaluate(SIDEWAYS_JS) == []
    _shot(narrow, tmp_path, "window-390.png")


def test_two_timeline_columns_picked_open_their_comparison(signed_in, live_server, tmp_path):
    example, open_page = signed_in
    page = open_page(1280, 720)
    page.goto(f"{live_server.url}/runs/run-42/")
    reveal(page, "#item-timeline")
    page.check(f"input[name=pick][value='{example['ready'].id}']")
    page.check(f"input[name=pick][value='{example['hostile'].id}']")
    _shot(page, tmp_path, "run-picker-1280.png")
    page.get_by_role("button", name="Compare the two picked steps").click()
    page.wait_for_url("**/compare/?pick=**")
    assert page.locator(".problems").count() == 0
    assert "step-19 · " in page.locator(".compare-a").inner_text()
    assert "step-20 · attempt 2 of 2 · " in page.locator(".compare-b").inner_text()
    assert page.locator("h2", has_text="Flipped items").count() == 1
    _shot(page, tmp_path, "compare-1280.png")
    # one pick only: the compare page says what is missing, with its form
    page.goto(f"{live_server.url}/runs/run-42/")
    reveal(page, "#item-timeline")
    page.check(f"input[name=pick][value='{example['ready'].id}']")
    page.get_by_role("button", name="Compare the two picked steps").click()
    page.wait_for_url("**/compare/?pick=**")
    assert "you picked 1" in page.locator(".problems").inner_text()
    assert page.locator("#compare-form").is_visible()
    narrow = open_page(390, 844)
    for url in ("/compare/?run=run-42", f"/compare/?a={example['ready'].id}&b={example['hostile'].id}", "/runs/run-42/"):
        narrow.goto(f"{live_server.url}{url}")
        assert narrow.evaluate(SIDEWAYS_JS) == [], url
    _shot(narrow, tmp_path, "compare-390.png")
    narrow.goto(f"{live_server.url}/runs/run-42/")
    reveal(narrow, "#run-window")
    _shot(narrow, tmp_path, "run-window-390.png")


def test_an_assembly_under_a_retired_revision_is_badged(signed_in, live_server, tmp_path):
    example, open_page = signed_in
    page = open_page(1280, 720)
    page.goto(f"{live_server.url}/runs/run-42/")
    assert page.locator(".retired-revision").count() == 0
    policy_revision_publish(revision=example["draft"], user=example["owner"], note="revision 4")
    page.reload()
    badges = page.locator(".step-table .retired-revision")
    assert badges.count() == 3 and all(badge.is_visible() for badge in badges.all())
    assert "retired" in badges.first.get_attribute("title")
    _shot(page, tmp_path, "run-retired-1280.png")
    page.goto(f"{live_server.url}/assemblies/{example['ready'].id}/")
    badge = page.locator("#overview .retired-revision")
    assert badge.is_visible() and badge.inner_text() == "retired revision"
    box = badge.bounding_box()
    assert box["y"] + box["height"] <= 720  # in the first viewport, beside the revision it marks
    _shot(page, tmp_path, "inspector-retired-1280.png")


def _download(page, link) -> bytes:
    with page.expect_download() as info:
        link.click()
    return Path(info.value.path()).read_bytes()


def test_downloads_parse_and_hold_only_the_tenants_rows(signed_in, live_server, tmp_path):
    example, open_page = signed_in
    tenant_o = Tenant.objects.get(slug="tenant-o")
    policy_import(tenant=tenant_o, text=example_text("policy.yaml"), user=example["outsider"], publish=True, note="o")
    other = json.loads(json.dumps(example_json("request.json")).replace("tenant-x", "tenant-o"))
    template = next(c for c in other["candidates"] if c["item_id"] == "evidence-pi-transform-context")
    other["candidates"].append({**template, "item_id": "plan-42-r9-of-tenant-o", "content": "o",
                                "content_hash": sha256_text("o")})
    other_job = run_job(example["outsider"], other, "tenant-o")
    page = open_page(1280, 720)
    ready = example["ready"]
    page.goto(f"{live_server.url}/assemblies/{ready.id}/")
    manifest = json.loads(_download(page, page.locator("a.download", has_text="manifest")))
    assert manifest == manifest_document(Manifest.objects.get(job=ready))
    request = json.loads(_download(page, page.locator("a.download", has_text="request")))
    assert request == example_json("request.json")
    payload = json.loads(_download(page, page.locator("a.download", has_text="payload")))
    assert payload["messages"]
    page.goto(f"{live_server.url}/why/?q=plan-42-r&decision=")
    rows = list(csv.DictReader(io.StringIO(_download(page, page.locator("a.download", has_text="CSV")).decode())))
    assert rows and {row["tenant"] for row in rows} == {"tenant-x"}
    assert "plan-42-r9-of-tenant-o" not in {row["item_id"] for row in rows}
    found = json.loads(_download(page, page.locator("a.download", has_text="JSON")))
    assert len(found["rows"]) == len(rows)
    page.goto(f"{live_server.url}/runs/run-42/")
    timeline = list(csv.DictReader(io.StringIO(_download(page, page.locator("a.download", has_text="CSV")).decode())))
    assert {row["assembly"] for row in timeline} == {str(example[name].id) for name in ("ready", "blocked", "hostile")}
    outsider = open_page(1280, 720, username="outsider")
    for document in ("manifest", "payload", "request"):
        assert outsider.request.get(f"{live_server.url}/assemblies/{ready.id}/export/{document}.json").status == 404
    theirs = outsider.request.get(f"{live_server.url}/runs/run-42/timeline.csv")
    assert {row["assembly"] for row in csv.DictReader(io.StringIO(theirs.text()))} == {str(other_job.id)}
