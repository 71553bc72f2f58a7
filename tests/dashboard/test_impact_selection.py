"""The impact preview replays the requests the editor chooses: runs (ids), a date range (UTC days)
and a cap, checked field by field, in the policy's tenant only; the summary (how many replayed,
flips, blocked and ready changes) comes before the rows. The draft's upgrade record addresses the
example's blocked assembly, which is replayed first whatever the selection (seed §8)."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from ctxeng.accounts.models import Tenant
from manifests.models import Run
from policies.models import ImpactPreview, PreviewStatus

from .long_run import long_run

PAGE = "/policies/source-research/revisions/4/impact/"
RUN = PAGE + "run/"


@pytest.fixture
def run_z(example):
    """Three more steps of the policy in run-z, sealed an hour after the example's (newest)."""
    return long_run([example["ready"]], steps=3, run_id="run-z", block=1)


def _run(client, callbacks, data, htmx=False):
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    with callbacks(execute=True):
        return client.post(RUN, data, **headers)


def _replayed(preview: ImpactPreview) -> list[tuple[str, str]]:
    return [(row["job"]["run_id"], row["job"]["step_id"]) for row in preview.rows]


def test_a_preview_of_chosen_runs_replays_their_steps_after_the_addressed_one(owner_client, example, run_z,
                                                                          django_capture_on_commit_callbacks):
    _run(owner_client, django_capture_on_commit_callbacks, {"runs": "run-z"})
    preview = ImpactPreview.objects.get()
    assert preview.status == PreviewStatus.DONE and preview.selection == {"runs": ["run-z"]}
    blocked = (example["blocked"].run.run_id, example["blocked"].step_id)
    assert _replayed(preview) == [blocked, ("run-z", "step-3"), ("run-z", "step-2"), ("run-z", "step-1")]
    body = html.unescape(owner_client.get(PAGE).content.decode())
    assert "Replay of the latest 20 recorded requests of run run-z under revision 4" in body
    summary = body.index('<p class="summary">')
    assert body.index("4 requests replayed", summary) < body.index('<article class="impact-row')
    assert 'value="run-z"' in body  # the form starts from the last selection


def test_a_cap_and_a_date_range_narrow_the_replay(owner_client, example, run_z, django_capture_on_commit_callbacks):
    blocked = (example["blocked"].run.run_id, example["blocked"].step_id)
    _run(owner_client, django_capture_on_commit_callbacks, {"limit": "2"})
    assert _replayed(ImpactPreview.objects.get()) == [blocked, ("run-z", "step-3"), ("run-z", "step-2")]
    yesterday = (timezone.now() - timedelta(days=1)).date().isoformat()
    _run(owner_client, django_capture_on_commit_callbacks, {"until": yesterday})
    latest = ImpactPreview.objects.first()
    assert latest.selection == {"until": yesterday} and _replayed(latest) == [blocked]


@pytest.mark.parametrize(("data", "field", "message"), [
    ({"runs": "run-nope"}, "runs", "no step under this policy in run “run-nope”"),
    ({"since": "2026-13-01"}, "since", "“2026-13-01” is not a date (YYYY-MM-DD)"),
    ({"since": "2026-05-02", "until": "2026-05-01"}, "until", "2026-05-01 is before since (2026-05-02)"),
    ({"limit": "0"}, "limit", "“0” is not a whole number from 1 to 200"),
    ({"limit": "201"}, "limit", "“201” is not a whole number from 1 to 200"),
    ({"limit": "ten"}, "limit", "“ten” is not a whole number from 1 to 200"),
])
def test_a_wrong_field_is_named_and_nothing_runs(owner_client, example, data, field, message,
                                                django_capture_on_commit_callbacks):
    for htmx, status in ((True, 422), (False, 400)):
        response = _run(owner_client, django_capture_on_commit_callbacks, data, htmx=htmx)
        assert response.status_code == status
        errors = html.unescape(re.search(r'<ul class="error field-errors"[^>]*>(.*?)</ul>', response.content.decode(), re.S).group(1))
        assert f"<code>{field}</code>: {message}" in errors
        assert f'aria-describedby="impact-{field}-error"' in response.content.decode()
    assert not ImpactPreview.objects.exists()


def test_another_tenants_run_is_not_found(owner_client, example, django_capture_on_commit_callbacks):
    Run.objects.create(tenant=Tenant.objects.get(slug="tenant-o"), run_id="run-o")
    response = _run(owner_client, django_capture_on_commit_callbacks, {"runs": "run-o"}, htmx=True)
    assert response.status_code == 422 and "no step under this policy in run “run-o”" in html.unescape(response.content.decode())
    assert "run-o" not in owner_client.get(PAGE).content.decode().split('<datalist id="impact-runs">')[1].split("</datalist>")[0]
    assert not ImpactPreview.objects.exists()


def test_publishing_without_a_preview_is_said_beside_the_button(owner_client, example):
    body = owner_client.get(PAGE).content.decode()
    assert "No finished impact preview of this revision" in body and "publish-unpreviewed" in body
    assert "Publish revision 4 without a preview" in body
