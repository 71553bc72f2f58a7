"""The impact preview is a job started by POST (CSRF, policy_editor), with progress and a cancel.

Before, the impact page was a plain GET that any reviewer could open, replaying up to 20 recorded
requests synchronously in the request (22 s for 20 x 3,000 candidates). Now a GET only shows the
stored result of the latest preview; running one is a POST that saves an ImpactPreview and runs it
after commit (Celery with REDIS_URL, in-process otherwise), saving progress after each replay.
"""

from __future__ import annotations

import time

import pytest
from django.test import Client

from policies import dashboard_selectors
from policies.models import ImpactPreview, PolicyRevision, PreviewStatus
from policies.services import impact_preview_run, impact_preview_start

PAGE = "/policies/source-research/revisions/4/impact/"
RUN = PAGE + "run/"
RECORDED = 3  # the example's ready, blocked and hostile assemblies


def run_preview(client, django_capture_on_commit_callbacks, **extra):
    with django_capture_on_commit_callbacks(execute=True):
        return client.post(RUN, **extra)


@pytest.fixture
def no_replay_in_a_get(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a GET replayed a request")

    monkeypatch.setattr(dashboard_selectors, "impact_row", refuse)


def test_opening_the_impact_page_replays_nothing(reviewer_client, example, no_replay_in_a_get):
    response = reviewer_client.get(PAGE)
    assert response.status_code == 200
    assert "Not run yet. Running it needs the policy_editor role." in response.content.decode()
    assert not ImpactPreview.objects.exists()


def test_an_editor_runs_the_preview_and_everyone_sees_its_result(owner_client, example,
                                                                  django_capture_on_commit_callbacks):
    response = run_preview(owner_client, django_capture_on_commit_callbacks)
    assert response.status_code == 302 and response["Location"] == PAGE + "#impact"
    preview = ImpactPreview.objects.get()
    assert preview.status == PreviewStatus.DONE and (preview.done, preview.total) == (RECORDED, RECORDED)
    assert preview.requested_by == example["owner"] and preview.digest == example["draft"].digest
    reviewer_client = Client()
    reviewer_client.force_login(example["reviewer"])
    for client in (owner_client, reviewer_client):
        body = client.get(PAGE).content.decode()
        assert "web-context7-overview" in body  # below the draft's relevance floor
        assert "would flip" in body and "ranking_lost" in body and f"{RECORDED} of {RECORDED} replayed" in body


def test_a_reviewer_cannot_run_or_cancel_a_preview(reviewer_client, example,
                                                   django_capture_on_commit_callbacks):
    assert run_preview(reviewer_client, django_capture_on_commit_callbacks).status_code == 403
    assert not ImpactPreview.objects.exists()
    preview = impact_preview_start(revision=example["draft"], user=example["owner"])  # not run: no commit here
    assert reviewer_client.post(f"{PAGE}{preview.id}/cancel/").status_code == 403
    assert ImpactPreview.objects.get().status == PreviewStatus.QUEUED


def test_an_outsider_gets_404_everywhere(outsider_client, example, django_capture_on_commit_callbacks):
    preview = impact_preview_start(revision=example["draft"], user=example["owner"])
    assert run_preview(outsider_client, django_capture_on_commit_callbacks).status_code == 404
    assert outsider_client.get(f"{PAGE}{preview.id}/").status_code == 404
    assert outsider_client.post(f"{PAGE}{preview.id}/cancel/").status_code == 404
    assert ImpactPreview.objects.count() == 1


def test_running_needs_a_post_with_a_csrf_token(example, django_capture_on_commit_callbacks):
    client = Client(enforce_csrf_checks=True)
    client.force_login(example["owner"])
    assert client.get(RUN).status_code == 405
    assert run_preview(client, django_capture_on_commit_callbacks).status_code == 403  # no CSRF token
    assert not ImpactPreview.objects.exists()
    page = client.get(PAGE).content.decode()
    token = page.split('name="csrfmiddlewaretoken" value="')[1].split('"')[0]
    response = run_preview(client, django_capture_on_commit_callbacks, data={"csrfmiddlewaretoken": token})
    assert response.status_code == 302 and ImpactPreview.objects.get().status == PreviewStatus.DONE


def test_a_running_preview_stops_at_a_cancel_between_replays(example, monkeypatch):
    real_row = dashboard_selectors.impact_row
    replayed = []

    def row_then_cancel(job, draft, **addressed):  # an assembly an upgrade addresses comes first, with `addressed`
        replayed.append(job.id)
        if len(replayed) == 1:  # the editor presses Cancel while the first replay runs
            ImpactPreview.objects.update(cancel_requested=True)
        return real_row(job, draft, **addressed)

    monkeypatch.setattr(dashboard_selectors, "impact_row", row_then_cancel)
    preview = impact_preview_start(revision=example["draft"], user=example["owner"])
    impact_preview_run(preview_id=preview.id)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.CANCELED and preview.stopped_reason == "canceled"
    assert (preview.done, preview.total, len(preview.rows), len(replayed)) == (1, RECORDED, 1, 1)


def test_the_cancel_button_asks_a_running_preview_to_stop(owner_client, example):
    preview = impact_preview_start(revision=example["draft"], user=example["owner"])
    ImpactPreview.objects.filter(pk=preview.pk).update(status=PreviewStatus.RUNNING)
    response = owner_client.post(f"{PAGE}{preview.id}/cancel/", HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and 'id="impact"' in response.content.decode()
    assert ImpactPreview.objects.get().cancel_requested is True


def test_canceling_a_queued_preview_ends_it_and_a_late_delivery_does_nothing(owner_client, example):
    preview = impact_preview_start(revision=example["draft"], user=example["owner"])
    assert owner_client.post(f"{PAGE}{preview.id}/cancel/").status_code == 302
    impact_preview_run(preview_id=preview.id)  # the message arrives after the cancel
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.CANCELED and preview.done == 0 and preview.started_at is None


def test_a_preview_stops_starting_replays_at_the_time_limit(example, settings):
    settings.CTXENG_IMPACT_TIME_LIMIT_SECONDS = 1e-9
    preview = impact_preview_start(revision=example["draft"], user=example["owner"])
    impact_preview_run(preview_id=preview.id)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.DONE and (preview.done, preview.total) == (1, RECORDED)
    assert preview.stopped_reason == "stopped at the time limit of 1e-09 s (CTXENG_IMPACT_TIME_LIMIT_SECONDS)"


def test_progress_is_polled_while_the_preview_runs_and_not_after(owner_client, example):
    preview = impact_preview_start(revision=example["draft"], user=example["owner"])
    ImpactPreview.objects.filter(pk=preview.pk).update(status=PreviewStatus.RUNNING, total=RECORDED, done=1)
    running = owner_client.get(f"{PAGE}{preview.id}/", HTTP_HX_REQUEST="true").content.decode()
    assert f'hx-get="{PAGE}{preview.id}/"' in running and "1 of 3 replayed" in running
    assert '<progress value="1" max="3">' in running and 'id="cancel-impact"' in running
    ImpactPreview.objects.filter(pk=preview.pk).update(status=PreviewStatus.DONE, done=RECORDED)
    done = owner_client.get(f"{PAGE}{preview.id}/", HTTP_HX_REQUEST="true").content.decode()
    assert "hx-get" not in done.split(">", 1)[0] and 'id="cancel-impact"' not in done


def test_a_new_run_cancels_the_unfinished_one(example):
    first = impact_preview_start(revision=example["draft"], user=example["owner"])
    second = impact_preview_start(revision=example["draft"], user=example["owner"])
    first.refresh_from_db()
    assert first.status == PreviewStatus.CANCELED and second.status == PreviewStatus.QUEUED


def test_a_result_older_than_the_draft_says_so(owner_client, example, django_capture_on_commit_callbacks):
    run_preview(owner_client, django_capture_on_commit_callbacks)
    PolicyRevision.objects.filter(pk=example["draft"].pk).update(digest="sha256:" + "0" * 64)
    assert "changed after this preview ran" in owner_client.get(PAGE).content.decode()


def test_a_preview_of_a_revision_edited_before_it_ran_fails_with_the_reason(example):
    preview = impact_preview_start(revision=example["draft"], user=example["owner"])
    PolicyRevision.objects.filter(pk=example["draft"].pk).update(digest="sha256:" + "0" * 64)
    impact_preview_run(preview_id=preview.id)
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.FAILED and "the revision changed after the preview was requested" in preview.error


def test_a_celery_worker_runs_the_preview(start_worker, transactional_db):
    """With REDIS_URL the preview is a Celery task (policies.run_impact_preview) on a real worker."""
    from .conftest import build_example

    example = build_example()
    start_worker()
    client = Client()
    client.force_login(example["owner"])
    assert client.post(RUN).status_code == 302
    deadline = time.monotonic() + 120
    while ImpactPreview.objects.get().status != PreviewStatus.DONE:
        assert time.monotonic() < deadline, ImpactPreview.objects.get()
        time.sleep(0.3)
    assert ImpactPreview.objects.get().done == RECORDED
    assert "would flip" in client.get(PAGE).content.decode()


def test_a_preview_of_an_unsaved_draft_records_who_asked_and_the_body_it_describes(example):
    # The editor's current text, parsed and not saved: the preview keeps it and its requester.
    from ctxeng.engine import parse_policy, policy_digest
    from policies.services import impact_preview_start

    draft = parse_policy(example["draft"].body)
    preview = impact_preview_start(revision=example["draft"], user=example["owner"], draft=draft)
    assert preview.requested_by == example["owner"]
    assert preview.digest == policy_digest(draft) and preview.body == example["draft"].body


def _running_since(preview, started_at):
    ImpactPreview.objects.filter(pk=preview.pk).update(status=PreviewStatus.RUNNING, started_at=started_at, total=3)


def test_a_running_preview_whose_runner_is_gone_ends_failed_at_the_next_poll(owner_client, example):
    from django.utils import timezone

    from policies.services import impact_preview_orphan_after

    preview = impact_preview_start(revision=example["draft"], user=example["owner"])
    # Past the bound no runner can still be at work (the loop's time limit, Celery's hard limit).
    _running_since(preview, timezone.now() - impact_preview_orphan_after() - timezone.timedelta(seconds=5))
    region = owner_client.get(f"{PAGE}{preview.id}/", HTTP_HX_REQUEST="true").content.decode()
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.FAILED and preview.error.startswith("interrupted: the process running it")
    assert "hx-get" not in region.split(">", 1)[0] and 'id="cancel-impact"' not in region
    impact_preview_run(preview_id=preview.id)  # a late runner finds nothing to claim
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.FAILED


def test_a_running_preview_inside_the_bound_is_left_running_and_asked_to_stop(owner_client, example):
    from django.utils import timezone

    from policies.services import impact_preview_orphan_after

    preview = impact_preview_start(revision=example["draft"], user=example["owner"])
    _running_since(preview, timezone.now() - impact_preview_orphan_after() + timezone.timedelta(seconds=30))
    owner_client.get(f"{PAGE}{preview.id}/", HTTP_HX_REQUEST="true")
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.RUNNING and not preview.error
    owner_client.post(f"{PAGE}{preview.id}/cancel/", HTTP_HX_REQUEST="true")
    preview.refresh_from_db()
    assert preview.status == PreviewStatus.RUNNING and preview.cancel_requested is True


def test_a_new_run_ends_an_orphaned_preview_of_the_revision(example):
    from django.utils import timezone

    from policies.services import impact_preview_orphan_after

    stuck = impact_preview_start(revision=example["draft"], user=example["owner"])
    _running_since(stuck, timezone.now() - impact_preview_orphan_after() - timezone.timedelta(seconds=5))
    impact_preview_start(revision=example["draft"], user=example["owner"])
    stuck.refresh_from_db()
    assert stuck.status == PreviewStatus.FAILED and "interrupted" in stuck.error
