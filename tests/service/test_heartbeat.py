"""A running job's heartbeat is refreshed by the worker process's heartbeat thread, and only while it runs."""

from __future__ import annotations

import time

import pytest


@pytest.mark.django_db(transaction=True)
def test_a_running_jobs_heartbeat_advances_until_its_body_ends(settings, monkeypatch, published_policy, agent_user,
                                                               example_request):
    from manifests import services
    from manifests.models import AssemblyJob
    from manifests.services import assembly_job_claim, assembly_job_heartbeat, assembly_job_submit

    settings.CTXENG_HEARTBEAT_SECONDS = 0.05
    monkeypatch.setattr(services, "assembly_job_enqueue", lambda **kwargs: None)  # the test plays the worker
    job, _ = assembly_job_submit(user=agent_user, data=example_request)
    attempt = assembly_job_claim(job_id=job.id)
    claimed_beat = AssemblyJob.objects.get(id=job.id).heartbeat_at

    with assembly_job_heartbeat(job_id=job.id, attempt=attempt):
        deadline = time.monotonic() + 10
        while AssemblyJob.objects.get(id=job.id).heartbeat_at == claimed_beat:
            assert time.monotonic() < deadline, "no heartbeat within 10 s"
            time.sleep(0.02)
    time.sleep(0.2)  # a beat already under way lands; then the job is no longer beaten
    last_beat = AssemblyJob.objects.get(id=job.id).heartbeat_at
    time.sleep(0.3)
    assert AssemblyJob.objects.get(id=job.id).heartbeat_at == last_beat
