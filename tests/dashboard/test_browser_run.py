"""The run level in headless Chromium (issue 41): from a long run's page a reviewer reaches "why
was item X excluded at step N" in two page loads (the step table's reason count opens that step's
inspector filtered to the reason; the item is selected in place), and j / k move between the
inspector's items with the focus on the selected item's heading."""

from __future__ import annotations

import pytest

from manifests.models import Manifest
from manifests.selectors import manifest_document

from .long_run import long_run

pytestmark = pytest.mark.slow


def test_why_an_item_was_excluded_at_step_n_is_two_page_loads_from_the_run_page(signed_in, live_server, tmp_path):
    example, open_page = signed_in
    jobs = long_run([example["ready"], example["blocked"], example["hostile"]], steps=60)
    step = jobs[19]  # step-20
    document = manifest_document(Manifest.objects.get(job=step))
    expected = next(row for row in document["excluded"] if row["item_id"] == "plan-42-r4")  # written by hand below
    assert expected["reason"] == "stale_revision"
    page = open_page(1440, 900)
    loads: list[str] = []
    page.on("load", lambda p: loads.append(p.url))
    page.goto(f"{live_server.url}/runs/run-long/")
    row = page.locator("tr#step-20")
    assert "step-20" in row.inner_text()
    row.locator("a.chip", has_text="stale_revision").click()
    page.wait_for_url(f"**/assemblies/{step.id}/?reason=stale_revision")
    page.locator("#items a.select-item", has_text="plan-42-r4").click()
    page.wait_for_url("**item=plan-42-r4**")
    page.wait_for_selector("#inspector-title:has-text('plan-42-r4')")
    story = page.locator("#inspector").inner_text()
    assert "stale_revision" in story and "required_revision" in story
    assert "artifact_id 'plan-42' is at revision 4; task_spec requires 5" in story
    assert page.evaluate("document.activeElement && document.activeElement.id") == "inspector-title"
    assert len(loads) == 2, loads
    page.screenshot(path=str(tmp_path / "why-at-step-20.png"))


def test_j_and_k_move_between_the_inspectors_items(signed_in, live_server, tmp_path):
    example, open_page = signed_in
    page = open_page(1280, 800)
    page.goto(f"{live_server.url}/assemblies/{example['ready'].id}/")
    listed = page.locator("#items a.select-item code").all_inner_texts()
    assert len(listed) > 3
    page.keyboard.press("j")
    page.wait_for_selector(f"#inspector-title:has-text('{listed[0]}')")
    page.keyboard.press("j")
    page.wait_for_selector(f"#inspector-title:has-text('{listed[1]}')")
    assert f"item={listed[1]}" in page.url
    assert page.locator("#items tr.focus code").inner_text() == listed[1]
    assert page.evaluate("document.activeElement.id") == "inspector-title"
    page.keyboard.press("j")
    page.wait_for_selector(f"#inspector-title:has-text('{listed[2]}')")
    page.keyboard.press("k")
    page.wait_for_selector(f"#inspector-title:has-text('{listed[1]}')")
    # typing in the search box is not navigation
    page.focus("#items input[name=q]")
    page.keyboard.press("j")
    assert page.locator("#items input[name=q]").input_value() == "j"
    assert page.locator("#items tr.focus code").inner_text() == listed[1]
    # the previous / next step links keep the item
    page.goto(f"{live_server.url}/assemblies/{example['ready'].id}/?item=plan-42-r4")
    page.locator("nav.step-nav a[rel=next]").click()
    page.wait_for_url(f"**/assemblies/{example['blocked'].id}/?item=plan-42-r4")
    assert "plan-42-r4" in page.locator("#inspector-title").inner_text()
