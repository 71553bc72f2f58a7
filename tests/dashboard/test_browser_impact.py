"""The impact preview in headless Chromium, without REDIS_URL (issue 52): the POST answers at once,
the region shows "n of N replayed" rising while the preview runs on the service's thread, and
Cancel stops it; a finished preview over a 200-step run lists its changes a page at a time.
Screenshots go to pytest's tmp_path.
"""

from __future__ import annotations

import re

import pytest

from manifests.models import AssemblyJob
from policies import dashboard_selectors
from policies.models import ImpactPreview, PreviewStatus

from .long_run import long_run

pytestmark = pytest.mark.slow

IMPACT = "/policies/source-research/revisions/4/impact/"
# "<done> of <total> replayed" in the region's status line
PROGRESS_JS = """() => { const m = (document.querySelector('#impact .preview-status') || {textContent: ''})
  .textContent.match(/(\\d+) of (\\d+) replayed/); return m ? [Number(m[1]), Number(m[2])] : null; }"""


@pytest.fixture
def long_example(signed_in):
    example, open_page = signed_in
    sources = list(AssemblyJob.objects.filter(run__run_id="run-42", manifest__isnull=False).order_by("created_at"))
    long_run(sources, steps=200, run_id="run-long")
    return example, open_page


def test_an_in_process_preview_shows_its_progress_and_is_canceled(long_example, live_server, settings, tmp_path):
    assert settings.CTXENG_JOBS_INLINE  # no REDIS_URL: the preview runs in the service's process
    _, open_page = long_example
    page = open_page(1280, 720)
    page.goto(live_server.url + IMPACT)
    page.fill("#impact input[name=runs]", "run-long")
    page.fill("#impact input[name=limit]", "200")
    page.click("#run-impact")
    # the region comes back at once with the job's progress and a Cancel button, then polls
    page.wait_for_selector("#impact #cancel-impact")
    page.wait_for_function(f"() => {{ const p = ({PROGRESS_JS})(); return p && p[0] >= 2; }}", timeout=120_000)
    done, total = page.evaluate(PROGRESS_JS)
    assert total >= 200 and 2 <= done < total
    assert page.locator("#impact progress").get_attribute("max") == str(total)
    page.screenshot(path=str(tmp_path / "impact-running.png"))
    page.click("#cancel-impact")
    page.wait_for_selector("#impact .preview-status .badge:text-is('canceled')", timeout=120_000)
    preview = ImpactPreview.objects.get()
    assert preview.status == PreviewStatus.CANCELED and preview.stopped_reason == "canceled"
    assert done <= preview.done < preview.total and len(preview.rows) == preview.done
    shown = page.evaluate(PROGRESS_JS)
    assert shown == [preview.done, preview.total]
    assert page.locator("#impact #cancel-impact").count() == 0 and page.locator("#impact progress").count() == 0
    page.screenshot(path=str(tmp_path / "impact-canceled.png"))


def test_a_finished_preview_of_a_long_run_lists_its_changes_a_page_at_a_time(long_example, live_server, tmp_path):
    _, open_page = long_example
    page = open_page(1280, 720)
    page.goto(live_server.url + IMPACT)
    page.fill("#impact input[name=runs]", "run-long")
    page.fill("#impact input[name=limit]", "30")
    page.click("#run-impact")
    page.wait_for_selector("#impact .preview-status .badge:text-is('done')", timeout=180_000)
    head = page.locator("#impact-listing").inner_text()
    listed = int(re.search(r"of the (\d+) replays? that change", head).group(1))
    per_page = dashboard_selectors.IMPACT_ROWS_PER_PAGE
    assert listed > per_page and "Export every row as CSV" in head
    first = page.locator("#impact article.impact-row h3 a").first.inner_text()
    page.click("#impact-next")  # htmx swaps the region for its next page
    pages = -(-listed // per_page)
    page.wait_for_selector(f"#impact .impact-pager span:text-is('page 2 of {pages}')")
    assert page.locator("#impact article.impact-row h3 a").first.inner_text() != first
    assert page.locator("#impact article.impact-row").count() == min(per_page, listed - per_page)
    page.screenshot(path=str(tmp_path / "impact-page-2.png"))
