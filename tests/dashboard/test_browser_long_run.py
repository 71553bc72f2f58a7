"""A long run in headless Chromium (issue 52): a 200-step run opens on its last steps, "go to
step 137" lands on that row, and searching the user's correction by its words opens the inspector
on it at the step it arrived. The expected steps are written by hand from how the run is built."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from .long_run import corrected_step, long_run

pytestmark = pytest.mark.slow

DOCS_SHOTS = {"run-long.png", "payload-links.png"}  # docs/dashboard.md's, refreshed by `make screenshots`


def screenshot(page, folder: Path, name: str, *, full_page: bool = False) -> None:
    """Save `name` in the test's folder, and a docs one in CTXENG_SCREENSHOTS when that is set."""
    page.screenshot(path=str(folder / name), full_page=full_page)
    refresh = os.environ.get("CTXENG_SCREENSHOTS")
    if refresh and name in DOCS_SHOTS:
        Path(refresh).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder / name, Path(refresh) / name)


def _shown_steps(page) -> list[int]:
    return [int(text) for text in page.locator("table.step-table tr.step-row td:first-child").all_inner_texts()]


def test_a_200_step_run_opens_on_its_last_steps_and_go_to_step_137_lands_there(signed_in, live_server, tmp_path):
    example, open_page = signed_in
    jobs = long_run([example["ready"], example["blocked"]], steps=200)
    page = open_page(1280, 720)
    page.goto(f"{live_server.url}/runs/run-long/")
    assert _shown_steps(page) == list(range(151, 201))
    assert "steps 151–200 of 200" in page.locator("nav.step-window").first.inner_text()
    page.fill("form.go-to-step input[name=step]", "137")
    page.click("form.go-to-step button")
    page.wait_for_url("**/runs/run-long/?steps=112-161#step-137")
    row = page.locator("tr#step-137")
    assert row.locator("td.step-cell a").inner_text() == "step-137"
    assert row.locator("td.step-cell a").get_attribute("href") == f"/assemblies/{jobs[136].id}/"
    assert row.is_visible() and page.evaluate("() => { const r = document.getElementById('step-137').getBoundingClientRect();"
                                               " return r.top >= 0 && r.bottom <= window.innerHeight; }")
    assert page.evaluate("getComputedStyle(document.querySelector('tr#step-137 td')).backgroundColor") != \
        page.evaluate("getComputedStyle(document.querySelector('tr#step-138 td')).backgroundColor")
    screenshot(page, tmp_path, "run-long.png")
    # paging both ways from there
    page.locator("nav.step-window a[rel=prev]").first.click()
    page.wait_for_url("**/runs/run-long/?steps=62-111#steps")
    assert _shown_steps(page) == list(range(62, 112))
    page.locator("nav.step-window a[rel=next]").first.click()
    page.wait_for_url("**/runs/run-long/?steps=112-161#steps")
    assert _shown_steps(page)[0] == 112


def test_searching_a_corrections_words_opens_the_inspector_on_it(signed_in, live_server, tmp_path):
    example, open_page = signed_in
    jobs = long_run([example["ready"], corrected_step(example)], steps=200, block=150)  # steps 151-200 carry it
    page = open_page(1280, 720)
    page.goto(f"{live_server.url}/runs/run-long/")
    page.fill("#run-search input[name=q]", "hello-agents out")
    page.click("#run-search button[type=submit]")
    hit = page.locator("#run-search a.search-hit")
    hit.wait_for()
    assert hit.count() == 1 and hit.inner_text() == "user-correction at step-151"
    assert "user: “Correction: leave hello-agents out" in page.locator("#run-search").inner_text()
    hit.click()
    page.wait_for_url(f"**/assemblies/{jobs[150].id}/?item=user-correction")
    page.wait_for_selector("#inspector-title:has-text('user-correction')")
    assert "included" in page.locator("#inspector-title").inner_text()
    page.click("#item-body a")
    page.wait_for_selector("#item-body:has-text('Correction: leave hello-agents out')")
    screenshot(page, tmp_path, "search-correction.png")


def test_every_message_of_a_steps_payload_links_to_an_item(signed_in, live_server, tmp_path):
    example, open_page = signed_in
    job = corrected_step(example)
    page = open_page(1280, 720)
    page.goto(f"{live_server.url}/assemblies/{job.id}/input/")
    heads = page.locator("li.message-head")
    assert heads.count() >= 4
    for index in range(heads.count()):
        head = heads.nth(index)
        assert head.locator("a.message-item").count() >= 1, head.inner_text()
    roles = page.locator("li.message-head span.badge.role").all_inner_texts()
    assert {"system", "user", "assistant", "tool"} <= set(roles)
    screenshot(page, tmp_path, "payload-links.png")
    user_turn = page.locator("li.message-head", has=page.locator("a.message-item", has_text="user-correction"))
    assert "user turn" in user_turn.inner_text()
    user_turn.locator("a.message-item").click()
    page.wait_for_url(f"**/assemblies/{job.id}/?item=user-correction")
    page.wait_for_selector("#inspector-title:has-text('user-correction')")
    page.wait_for_selector("#item-payload .payload-message")
    assert "as user turn" in page.locator("#item-payload .payload-message").inner_text()
