"""Per-tenant quotas (issue 30, finding 11): one agent token stored 150 unique 1 MB artifacts in
14 s with no limit. Each quota (settings CTXENG_QUOTA_*) is shown refusing the write that passes
it, with the status, Retry-After and an error naming the quota and its setting, storing nothing,
while writes within it (or adding no new bytes) pass. Windows are moved by ageing the rows, never
by waiting.
"""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
from django.db.models import Sum
from django.utils import timezone

from ctxeng.content.models import Content
from manifests.models import Artifact, AssemblyJob, Run

URL = "/api/v1/assemblies/"
ARTIFACTS = "/api/v1/artifacts/"


def request_for(example_request, *, run_id: str | None = None, step: int = 0, extra: str = ""):
    body = copy.deepcopy(example_request)
    body["step_id"] = f"{body['step_id']}-{step}"
    if run_id is not None:
        body["run_id"] = run_id
    if extra:
        body["candidates"][0]["content"] += extra
    return body


def test_jobs_per_minute_beyond_the_quota_are_429_with_retry_after(settings, agent_api, published_policy,
                                                                    example_request, submit):
    settings.CTXENG_QUOTA_JOBS_PER_MINUTE = 3
    assert [submit(agent_api, request_for(example_request, step=i), key=f"k{i}").status_code
            for i in range(3)] == [202] * 3
    refused = submit(agent_api, request_for(example_request, step=3), key="k3")
    assert refused.status_code == 429
    retry_after = int(refused["Retry-After"])
    assert 1 <= retry_after <= 60
    assert refused.json() == {"errors": [
        f"quota: jobs per minute: 3 in the last minute, the limit is 3 (CTXENG_QUOTA_JOBS_PER_MINUTE); "
        f"retry in {retry_after} s"]}
    assert AssemblyJob.objects.count() == 3
    # A replay of an accepted submit is no new job: answered, not refused.
    assert submit(agent_api, request_for(example_request, step=0), key="k0").status_code in (200, 202)
    # A minute later (the rows aged), the same submit is accepted.
    AssemblyJob.objects.update(created_at=timezone.now() - timedelta(seconds=61))
    assert submit(agent_api, request_for(example_request, step=3), key="k3").status_code == 202


def test_new_runs_per_day_beyond_the_quota_are_429_but_steps_of_existing_runs_pass(
        settings, agent_api, published_policy, example_request, submit):
    settings.CTXENG_QUOTA_RUNS_PER_DAY = 2
    assert submit(agent_api, request_for(example_request, run_id="run-a")).status_code == 202
    assert submit(agent_api, request_for(example_request, run_id="run-b")).status_code == 202
    refused = submit(agent_api, request_for(example_request, run_id="run-c"))
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert refused.json()["errors"][0].startswith(
        "quota: runs per day: 2 in the last 24 hours, the limit is 2 (CTXENG_QUOTA_RUNS_PER_DAY)")
    assert not Run.objects.filter(run_id="run-c").exists()
    assert submit(agent_api, request_for(example_request, run_id="run-a", step=1)).status_code == 202
    Run.objects.update(created_at=timezone.now() - timedelta(days=1, seconds=1))
    assert submit(agent_api, request_for(example_request, run_id="run-c")).status_code == 202


def artifact(artifact_id: str, content: str, revision: int = 1) -> dict:
    return {"artifact_id": artifact_id, "revision": revision, "kind": "note", "content": content,
            "writer": "agent", "scope": "run-42"}


def test_artifact_bytes_beyond_the_quota_are_413_and_nothing_is_stored(settings, agent_api, agent_user):
    settings.CTXENG_QUOTA_ARTIFACT_BYTES = 1000
    first, second = "a" * 600, "b" * 600
    assert agent_api.post(ARTIFACTS, artifact("plan-1", first), format="json").status_code == 201
    refused = agent_api.post(ARTIFACTS, artifact("plan-2", second), format="json")
    assert refused.status_code == 413
    assert refused.json() == {"errors": [
        "quota: artifact bytes: this write would store 1200 bytes, more than the limit 1000 "
        "(CTXENG_QUOTA_ARTIFACT_BYTES); nothing was stored"]}
    assert list(Artifact.objects.values_list("artifact_id", flat=True)) == ["plan-1"]
    assert not Content.objects.filter(size=600).exclude(body=None).filter(body__contains=b"b").exists()
    # The same body again (a new revision) adds no bytes: stored.
    assert agent_api.post(ARTIFACTS, artifact("plan-1", first, revision=2), format="json").status_code == 201


def test_stored_content_beyond_the_quota_is_413_and_no_job_is_saved(settings, agent_api, published_policy,
                                                                    example_request, submit):
    """Counted at submit: an accepted job's manifest is stored whatever the quota (a job accepted
    is never failed for it), and counts against the next submit."""
    assert submit(agent_api, request_for(example_request)).status_code == 202
    stored = Content.objects.aggregate(total=Sum("size"))["total"]
    settings.CTXENG_QUOTA_CONTENT_BYTES = stored + 100
    jobs = AssemblyJob.objects.count()
    refused = submit(agent_api, request_for(example_request, step=2, extra="x" * 500))
    assert refused.status_code == 413
    (error,) = refused.json()["errors"]
    assert error.startswith("quota: stored content bytes: this write would store ")
    assert error.endswith(f"more than the limit {stored + 100} (CTXENG_QUOTA_CONTENT_BYTES); nothing was stored")
    assert AssemblyJob.objects.count() == jobs
    assert Content.objects.aggregate(total=Sum("size"))["total"] == stored
    # The first request again stores no new content: accepted at the quota's edge.
    assert submit(agent_api, request_for(example_request)).status_code == 202


@pytest.mark.parametrize("setting", ["CTXENG_QUOTA_JOBS_PER_MINUTE", "CTXENG_QUOTA_RUNS_PER_DAY"])
def test_a_quota_of_zero_is_no_limit(settings, setting, agent_api, published_policy, example_request, submit):
    setattr(settings, setting, 0)
    assert [submit(agent_api, request_for(example_request, run_id=f"r{i}")).status_code for i in range(3)] == [202] * 3
