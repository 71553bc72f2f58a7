"""The job lifecycle without a worker: the guarded claim, the stale-job sweep, the attempt cap."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from django.utils import timezone

from manifests.models import AssemblyJob, Manifest
from manifests.services import assembly_job_assemble, assembly_job_claim, assembly_jobs_recover


def test_a_second_delivery_claims_nothing(lost_job):
    assert assembly_job_claim(job_id=lost_job.id) == 1
    assert assembly_job_claim(job_id=lost_job.id) is None
    assert AssemblyJob.objects.get(id=lost_job.id).attempts == 1


def test_a_stale_running_job_is_requeued_and_then_finishes_once(lost_job, monkeypatch):
    import manifests.services

    sent = []
    monkeypatch.setattr(manifests.services, "assembly_job_enqueue", lambda *, job_id, **_: sent.append(job_id))
    first = assembly_job_claim(job_id=lost_job.id)
    AssemblyJob.objects.filter(id=lost_job.id).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    assert assembly_jobs_recover()["requeued"] == 1
    assert sent == [lost_job.id]
    second = assembly_job_claim(job_id=lost_job.id)
    assert second == 2
    # The lost first attempt wakes up late: its claim is gone, it writes nothing.
    assert assembly_job_assemble(job_id=lost_job.id, attempt=first) == "running"
    assert not Manifest.objects.filter(job_id=lost_job.id).exists()
    assert assembly_job_assemble(job_id=lost_job.id, attempt=second) == "ready"
    assert Manifest.objects.filter(job_id=lost_job.id).count() == 1


def test_a_live_running_job_is_left_alone(lost_job):
    assembly_job_claim(job_id=lost_job.id)
    assert assembly_jobs_recover() == {"requeued": 0, "failed": 0, "resent": 0}
    assert AssemblyJob.objects.get(id=lost_job.id).status == "running"


def test_a_job_out_of_attempts_ends_failed(lost_job, settings):
    settings.CTXENG_MAX_ATTEMPTS = 1
    assembly_job_claim(job_id=lost_job.id)
    AssemblyJob.objects.filter(id=lost_job.id).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    assert assembly_jobs_recover()["failed"] == 1
    job = AssemblyJob.objects.get(id=lost_job.id)
    assert job.status == "failed"
    assert "1 attempts" in job.error


def test_a_queued_job_whose_message_was_lost_is_sent_again(lost_job, monkeypatch):
    import manifests.services

    sent = []
    monkeypatch.setattr(manifests.services, "assembly_job_enqueue", lambda *, job_id, **_: sent.append(job_id))
    AssemblyJob.objects.filter(id=lost_job.id).update(enqueued_at=timezone.now() - timedelta(minutes=5))
    assert assembly_jobs_recover()["resent"] == 1
    assert assembly_jobs_recover()["resent"] == 0
    assert sent == [lost_job.id]


def test_a_broker_outage_at_submit_leaves_the_job_queued_not_a_500(
    published_policy, agent_api, example_request, settings, django_capture_on_commit_callbacks
):
    from tests.service_fixtures import use_broker

    settings.CTXENG_JOBS_INLINE = False
    use_broker("redis://127.0.0.1:1/0")  # nothing listens on port 1
    try:
        with django_capture_on_commit_callbacks(execute=True):
            response = agent_api.post("/api/v1/assemblies/", example_request, format="json")
    finally:
        use_broker("memory://")
    assert response.status_code == 202
    assert AssemblyJob.objects.get(id=response.json()["id"]).status == "queued"


@pytest.mark.parametrize("returning", [True, False], ids=["UPDATE ... RETURNING", "update, then read"])
def test_the_claim_is_the_same_whichever_statement_makes_it(lost_job, returning, settings, monkeypatch):
    """Where the database has no UPDATE ... RETURNING (SQLite before 3.35) the claim is an update
    and a read; both write the same columns and give the same attempt numbers, up to the cap."""
    from django.db import connection

    monkeypatch.setattr(connection.features, "can_return_columns_from_insert", returning)
    before = timezone.now()
    assert assembly_job_claim(job_id=str(lost_job.id)) == 1
    job = AssemblyJob.objects.get(id=lost_job.id)
    assert (job.status, job.attempts) == ("running", 1)
    assert job.claimed_at == job.heartbeat_at == job.updated_at and job.claimed_at >= before
    assert job.claimed_by.endswith(f":{os.getpid()}")
    assert assembly_job_claim(job_id=lost_job.id) is None  # running: not claimable
    AssemblyJob.objects.filter(id=lost_job.id).update(status="queued", attempts=settings.CTXENG_MAX_ATTEMPTS - 1)
    assert assembly_job_claim(job_id=lost_job.id) == settings.CTXENG_MAX_ATTEMPTS
    AssemblyJob.objects.filter(id=lost_job.id).update(status="queued")
    assert assembly_job_claim(job_id=lost_job.id) is None  # at the attempt cap
    assert AssemblyJob.objects.get(id=lost_job.id).attempts == settings.CTXENG_MAX_ATTEMPTS
