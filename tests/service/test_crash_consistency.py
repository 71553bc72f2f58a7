"""Crash consistency: a worker SIGKILLed at each step of claim → assemble → seal → save.

One real Celery worker on real Redis and the test database (SQLite file or PostgreSQL). One job
per kill point, each in run `crash-at-<point>`; the test hook (CTXENG_TEST_CRASH_AT) makes the
worker's pool process SIGKILL itself at that point of the job's first attempt. The worker's main
process survives, so its stale-job sweep (fast settings here) requeues what the dead process
left running. Afterwards every job has exactly one manifest, whose item rows are complete, and
the attempt count says whether the kill came before the commit (2 attempts) or after it (1).
Waits end at the event; GENEROUS only bounds a stuck worker, and no duration is asserted.
"""

from __future__ import annotations

import pytest

from manifests.services import CRASH_POINTS

from .test_live_worker import GENEROUS, wait_final

pytestmark = pytest.mark.slow

# Before the commit the kill leaves the job running (the seal's transaction rolls back): the
# sweep requeues it and attempt 2 seals. After the commit the job is already final.
ATTEMPTS = {"claimed": 2, "assembled": 2, "status_written": 2, "manifest_written": 2, "committed": 1}


def test_a_worker_killed_at_any_step_leaves_one_complete_manifest_per_job(
    start_worker, published_policy, agent_api, example_request
):
    from manifests.models import AssemblyJob, Manifest, ManifestItem
    from manifests.selectors import manifest_document
    from manifests.services import assembly_job_claim

    assert set(ATTEMPTS) == set(CRASH_POINTS)
    worker = start_worker(
        CTXENG_TEST_CRASH_AT=",".join(CRASH_POINTS),
        CTXENG_HEARTBEAT_SECONDS="0.5",
        CTXENG_STALE_AFTER_SECONDS="3",
        CTXENG_SWEEP_SECONDS="1",
    )
    jobs = {}
    for point in CRASH_POINTS:
        body = {**example_request, "run_id": f"crash-at-{point}"}
        response = agent_api.post("/api/v1/assemblies/", body, format="json")
        assert response.status_code == 202, response.json()
        jobs[point] = response.json()["id"]

    for point, job_id in jobs.items():
        job = wait_final(agent_api, job_id, GENEROUS)
        assert job["status"] == "ready", (point, job, worker.log()[-4000:])
        assert job["attempts"] == ATTEMPTS[point], (point, job)
        assert job["error"] is None, (point, job)

    log = worker.log()
    assert log.count("signal 9") >= len(CRASH_POINTS), log[-4000:]
    for point, job_id in jobs.items():
        manifests = Manifest.objects.filter(job_id=job_id)
        assert manifests.count() == 1, point
        manifest = manifests.get()
        assert manifest.status == AssemblyJob.objects.get(id=job_id).status
        document = manifest_document(manifest)
        assert ManifestItem.objects.filter(manifest=manifest).count() == len(document["included"]) + len(
            document["excluded"]
        ), point
        # A redelivered message (acks_late, reject_on_worker_lost) claims nothing once the job is final.
        assert assembly_job_claim(job_id=job_id) is None
    assert Manifest.objects.count() == len(CRASH_POINTS)
