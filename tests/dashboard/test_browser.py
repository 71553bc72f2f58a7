"""Headless Chromium (the Debian package, driven by playwright) against a live server.

Loads the manifest page and the policy impact page of the worked example, asserts on what a
reviewer sees, and saves the screenshots the README shows. No browser is downloaded: a missing
/usr/bin/chromium fails the test (CI installs it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from manifests.examples import example_json

from .conftest import PASSWORD, build_example

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.slow


@pytest.fixture
def browser_page():
    assert os.path.exists(CHROMIUM), f"{CHROMIUM} is missing: apt-get install chromium"
    from playwright.sync_api import sync_playwright

    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        yield page
        browser.close()


def test_a_reviewer_sees_the_manifest_and_the_impact_preview_in_a_browser(transactional_db, live_server, browser_page):
    example = build_example()
    page = browser_page
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "owner")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")

    page.goto(f"{live_server.url}/assemblies/{example['ready'].id}/")
    page.wait_for_selector("#serialized-input-body")  # htmx loaded the provider payload
    assert page.locator("h1 .badge").inner_text() == "ready"
    # Every item the worked example must include has its row (the contract's list, not the manifest's own).
    rows = page.locator("#included tbody tr[id]").all_inner_texts()
    assert all(any(item_id in row for row in rows) for item_id in example_json("expected.json")["included"])
    assert "stale_revision" in page.locator("#excluded").inner_text()
    assert "retrieval_failed" in page.locator("#acquisition").inner_text()
    assert page.locator(".untrusted-block").count() > 0
    page.locator("#included a.more").first.click()
    page.wait_for_selector(".item-detail")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "manifest.png"), full_page=False)

    page.goto(f"{live_server.url}/policies/source-research/revisions/4/impact/")
    assert "budget.partitions.background.maximum" in page.locator("table.diff").inner_text()
    page.click("#run-impact")  # a POST; htmx swaps in the region, which polls until the job is done
    page.wait_for_selector("#impact .summary")
    impact = page.locator("#impact").inner_text()
    assert "would flip" in impact and "web-context7-overview" in impact
    page.screenshot(path=str(SCREENSHOTS / "policy-impact.png"), full_page=False)
