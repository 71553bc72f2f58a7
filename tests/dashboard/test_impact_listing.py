"""The impact preview as a job that never holds the browser (issue 52): without REDIS_URL it runs on
a thread of the service's process, so the POST answers at once and the region polls; its rows list
what changes first, a page at a time, with "no change" counted; each row links to its step and to
the policy diff; every row exports as CSV or JSON, streamed.
"""

from __future__ import annotations

import csv
import io
import json
import threading
import time

import pytest
from django.test import Client

from policies import dashboard_selectors
from policies.models import ImpactPreview, PreviewStatus
from policies.services import impact_preview_run, impact_preview_start

from .test_impact_job import PAGE, RECORDED, RUN, run_preview


def preview_row(n_flips: int = 0, *, error: str = "", addressed: bool = False, blocked: bool = False) -> dict:
    """A stored row's shape (dashboard_selectors.impact_row), with `n_flips` flips."""
    flips = [{"item_id": f"item-{i}", "before": {"decision": "included"}, "after": {"decision": "excluded"}}
             for i in range(n_flips)]
    comparison = None if error else {
        "flips": flips, "flip_count": n_flips, "flipped_item_ids": [f["item_id"] for f in flips],
        "partitions": [], "partitions_unchanged": 2, "status_a": "ready",
        "status_b": "blocked" if blocked else "ready", "blocked_reason_b": "x" if blocked else None}
    row = {"job": {"id": "j", "run_id": "r", "step_id": "s", "revision": 3}, "error": error, "comparison": comparison,
           "becomes_blocked": blocked, "changed": bool(n_flips or blocked)}
    if addressed:
        row["addressed"] = {"assembly_id": "a", "mechanisms": ["m"], "failure_gone": True, "recorded_failures": []}
    return row


def test_the_listing_puts_what_changes_first_and_counts_what_does_not(monkeypatch):
    monkeypatch.setattr(dashboard_selectors, "IMPACT_ROWS_PER_PAGE", 2)
    rows = [preview_row(0), preview_row(3), preview_row(error="boom"), preview_row(0), preview_row(0, addressed=True),
            preview_row(1, blocked=True), preview_row(2)]
    first = dashboard_selectors.impact_listing(rows, 1)
    # addressed, then becoming blocked, then not replayable, then the other changes, each in replay order
    assert [r["n"] for r in first["rows"]] == [5, 6]
    assert (first["listed"], first["no_change"], first["pages"], first["first"], first["last"]) == (5, 2, 3, 1, 2)
    second = dashboard_selectors.impact_listing(rows, 2)
    assert [r["n"] for r in second["rows"]] == [3, 2]
    # "Showing 3–4 of the 5": whole numbers on every page (seed 349366: a page's first row as a
    # division read 1.0 on the first page, equal to 1 in Python but "1.0" on the page)
    assert (second["first"], second["last"]) == (3, 4)
    assert all(type(listing[k]) is int for listing in (first, second) for k in ("first", "last", "pages"))
    last = dashboard_selectors.impact_listing(rows, 99)  # past the last page: the last
    assert (last["page"], [r["n"] for r in last["rows"]]) == (3, [7])


def test_the_export_lists_every_flipped_id_a_row_kept_beyond_the_flips_it_shows():
    # Written for a survivor of seed 349366 (docs/mutation.md): a row keeps its first
    # IMPACT_FLIPS_SHOWN flips and every flipped id; the export gives every id.
    row = preview_row(3)
    row["comparison"]["flips"] = row["comparison"]["flips"][:1]
    (exported,) = dashboard_selectors.impact_export_rows([row])
    assert exported["flipped_item_ids"] == ["item-0", "item-1", "item-2"] and exported["flip_count"] == 3
    older = preview_row(2)  # a row stored before the full list was kept: the flips it shows
    del older["comparison"]["flipped_item_ids"]
    (exported,) = dashboard_selectors.impact_export_rows([older])
    assert exported["flipped_item_ids"] == ["item-0", "item-1"]


def test_a_listed_row_shows_its_first_flips_and_the_stored_row_keeps_them_all(monkeypatch):
    rows = [preview_row(dashboard_selectors.IMPACT_FLIPS_ON_PAGE + 5)]
    (shown,) = dashboard_selectors.impact_listing(rows, 1)["rows"]
    assert len(shown["comparison"]["flips"]) == dashboard_selectors.IMPACT_FLIPS_ON_PAGE
    assert len(rows[0]["comparison"]["flips"]) == dashboard_selectors.IMPACT_FLIPS_ON_PAGE + 5


def test_the_page_lists_changes_with_links_to_the_step_and_the_diff(owner_client, example,
                                                                     django_capture_on_commit_callbacks):
    run_preview(owner_client, django_capture_on_commit_callbacks)
    preview = ImpactPreview.objects.get()
    listing = dashboard_selectors.impact_listing(preview.rows, 1)
    assert listing["listed"] + listing["no_change"] == RECORDED and listing["listed"] >= 1
    body = owner_client.get(PAGE).content.decode()
    for row in listing["rows"]:
        assert f'id="impact-row-{row["n"]}"' in body
        assert f'href="/assemblies/{row["job"]["id"]}/"' in body
        assert f'href="/policies/source-research/diff/?from={row["job"]["revision"]}&amp;to=4"' in body
    if listing["no_change"]:
        assert f'{listing["no_change"]} with no change' in body
    assert body.count('class="impact-row') == listing["listed"]
    assert f"{PAGE}{preview.id}/export.csv" in body and f"{PAGE}{preview.id}/export.json" in body


def test_a_page_number_that_is_not_one_is_refused_naming_it(owner_client, example, django_capture_on_commit_callbacks):
    run_preview(owner_client, django_capture_on_commit_callbacks)
    preview = ImpactPreview.objects.get()
    for bad in ("0", "two", "-1"):
        response = owner_client.get(f"{PAGE}{preview.id}/?page={bad}")
        assert response.status_code == 400 and "page" in response.content.decode(), bad
    assert owner_client.get(f"{PAGE}{preview.id}/?page=2").status_code == 200  # past the last: the last


def test_the_export_streams_every_row_as_csv_and_json(reviewer_client, example, django_capture_on_commit_callbacks):
    client = Client()
    client.force_login(example["owner"])
    run_preview(client, django_capture_on_commit_callbacks)
    preview = ImpactPreview.objects.get()
    response = reviewer_client.get(f"{PAGE}{preview.id}/export.csv")  # reading needs no editor role
    assert response.status_code == 200 and response.streaming
    assert response["Content-Disposition"] == 'attachment; filename="source-research-r4-impact.csv"'
    table = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [int(r["n"]) for r in table] == list(range(1, RECORDED + 1))
    assert [r["assembly"] for r in table] == [row["job"]["id"] for row in preview.rows]
    flipped = {i for row in preview.rows if row["comparison"] for i in row["comparison"]["flipped_item_ids"]}
    assert flipped and {i for r in table for i in json.loads(r["flipped_item_ids"])} == flipped
    response = reviewer_client.get(f"{PAGE}{preview.id}/export.json")
    assert response.status_code == 200 and response.streaming
    document = json.loads(b"".join(response.streaming_content))
    assert (document["preview"], document["replayed"], document["status"]) == (str(preview.id), RECORDED, "done")
    assert [r["changed"] for r in document["rows"]] == [bool(row.get("changed")) for row in preview.rows]
    assert [r["failure_gone"] for r in document["rows"]] == [
        (row.get("addressed") or {}).get("failure_gone") for row in preview.rows]


def test_the_export_refuses_an_unknown_format_and_hides_another_tenants_preview(owner_client, outsider_client, example):
    preview = impact_preview_start(revision=example["draft"], user=example["owner"])
    response = owner_client.get(f"{PAGE}{preview.id}/export.xlsx")
    assert response.status_code == 400 and "format" in response.content.decode()
    assert outsider_client.get(f"{PAGE}{preview.id}/export.csv").status_code == 404
    assert owner_client.get(f"{PAGE}00000000-0000-0000-0000-000000000000/export.csv").status_code == 404


@pytest.fixture
def gated_replays(monkeypatch):
    """Each replay waits until the test opens the gate, and records the thread it ran on."""
    real_row = dashboard_selectors.impact_row
    gate, threads = threading.Event(), []

    def gated(job, draft, **addressed):
        threads.append(threading.current_thread().name)
        assert gate.wait(60), "the gate was never opened"
        return real_row(job, draft, **addressed)

    monkeypatch.setattr(dashboard_selectors, "impact_row", gated)
    return gate, threads


def wait_for(preview_id, *statuses) -> ImpactPreview:
    deadline = time.monotonic() + 120
    while (preview := ImpactPreview.objects.get(pk=preview_id)).status not in statuses:
        assert time.monotonic() < deadline, preview
        time.sleep(0.1)
    return preview


def test_without_redis_the_post_answers_while_the_preview_runs_on_its_thread(transactional_db, gated_replays, settings):
    from .conftest import build_example

    assert settings.CTXENG_JOBS_INLINE
    gate, threads = gated_replays
    example = build_example()
    client = Client()
    client.force_login(example["owner"])
    response = client.post(RUN, HTTP_HX_REQUEST="true")
    # answered while the first replay is still held at the gate: the request did not run it
    preview = ImpactPreview.objects.get()
    assert response.status_code == 200 and preview.status in (PreviewStatus.QUEUED, PreviewStatus.RUNNING)
    assert preview.done == 0 and f'hx-get="{PAGE}{preview.id}/' in response.content.decode()
    gate.set()
    preview = wait_for(preview.id, PreviewStatus.DONE)
    assert preview.done == RECORDED and threads and set(threads) != {threading.current_thread().name}
    assert all(name.startswith("impact-preview") for name in threads)
    assert "would flip" in client.get(PAGE).content.decode()


def test_without_redis_a_running_preview_is_canceled_from_the_page(transactional_db, gated_replays):
    from .conftest import build_example

    gate, threads = gated_replays
    example = build_example()
    client = Client()
    client.force_login(example["owner"])
    client.post(RUN)
    preview = wait_for(ImpactPreview.objects.get().pk, PreviewStatus.RUNNING)
    while not threads:  # the first replay has started and waits at the gate
        time.sleep(0.05)
    assert client.post(f"{PAGE}{preview.id}/cancel/").status_code == 302
    gate.set()
    preview = wait_for(preview.id, PreviewStatus.CANCELED)
    assert (preview.done, preview.total, preview.stopped_reason) == (1, RECORDED, "canceled")


def test_inside_an_open_transaction_the_preview_runs_in_the_caller(example, django_capture_on_commit_callbacks):
    """A thread's connection could not see a row the caller has not committed (a test's transaction):
    there the preview runs in the caller, to the end."""
    with django_capture_on_commit_callbacks(execute=True):
        preview = impact_preview_start(revision=example["draft"], user=example["owner"])
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.DONE and preview.done == RECORDED
    impact_preview_run(preview_id=preview.id)  # a second delivery does nothing
    assert ImpactPreview.objects.get().done == RECORDED
