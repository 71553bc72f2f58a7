"""The service on real components: Celery workers (subprocesses) on real Redis, committed rows.

These tests use `transactional_db` (via `start_worker`), so the worker process sees what the test
commits: on SQLite a file database, on PostgreSQL the test database.
"""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.slow

# How long a test waits for an event from a real worker before it gives up. Generous on purpose: the
# wait ends at the event (usually seconds), so only a truly stuck worker ever reaches it, and a busy
# 2-core machine running the suite must not turn CI red.
GENEROUS = 300.0


def wait_final(client, job_id: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        job = client.get(f"/api/v1/assemblies/{job_id}/").json()
        if job["status"] in ("ready", "blocked", "failed"):
            return job
        if time.monotonic() > deadline:
            return job
        time.sleep(0.25)


def wait_status(job_id: str, status: str, timeout: float) -> None:
    from manifests.models import AssemblyJob

    deadline = time.monotonic() + timeout
    while AssemblyJob.objects.get(id=job_id).status != status:
        assert time.monotonic() < deadline, f"job {job_id} never reached {status}"
        time.sleep(0.1)


def test_the_worked_examples_pass_end_to_end_on_a_celery_worker(
    start_worker, published_policy, agent_api, example_request, example_blocked_request, expected
):
    worker = start_worker()
    ready = agent_api.post("/api/v1/assemblies/", example_request, format="json")
    blocked = agent_api.post("/api/v1/assemblies/", example_blocked_request, format="json")
    assert ready.status_code == blocked.status_code == 202

    job = wait_final(agent_api, ready.json()["id"], GENEROUS)
    assert job["status"] == "ready", (job, worker.log())
    manifest = agent_api.get(job["manifest_url"]).json()
    reasons = {e["item_id"]: e["reason"] for e in manifest["excluded"]}
    assert all(reasons.get(item) == reason for item, reason in expected["excluded"].items())
    assert agent_api.get(job["input_url"]).status_code == 200

    job = wait_final(agent_api, blocked.json()["id"], GENEROUS)
    assert job["status"] == "blocked", (job, worker.log())
    assert agent_api.get(f"/api/v1/assemblies/{job['id']}/input/").status_code == 409


def test_a_job_whose_worker_is_sigkilled_finishes_on_the_next_worker(
    start_worker, published_policy, agent_api, example_request
):
    """Default recovery settings; the first worker sleeps in the job so the kill lands mid-run.
    The wait ends when the job does; no duration is asserted (timing belongs in bench/)."""
    from manifests.models import AssemblyJob, Manifest

    doomed = start_worker(CTXENG_TEST_TASK_SLEEP_SECONDS="600")
    job_id = agent_api.post("/api/v1/assemblies/", example_request, format="json").json()["id"]
    wait_status(job_id, "running", GENEROUS)
    doomed.kill()

    worker = start_worker()
    job = wait_final(agent_api, job_id, GENEROUS)
    assert job["status"] == "ready", (job, worker.log()[-4000:])
    assert Manifest.objects.filter(job_id=job_id).count() == 1
    assert AssemblyJob.objects.get(id=job_id).attempts == 2


def test_a_job_that_always_crashes_its_worker_ends_failed_after_the_attempt_cap(
    start_worker, published_policy, agent_api, example_request
):
    from manifests.models import AssemblyJob, Manifest

    example_request["run_id"] = "crash-run"
    worker = start_worker(
        CTXENG_TEST_CRASH_RUN_ID="crash-run",
        CTXENG_HEARTBEAT_SECONDS="0.5",
        CTXENG_STALE_AFTER_SECONDS="3",
        CTXENG_SWEEP_SECONDS="1",
        CTXENG_MAX_ATTEMPTS="3",
    )
    job_id = agent_api.post("/api/v1/assemblies/", example_request, format="json").json()["id"]
    job = wait_final(agent_api, job_id, GENEROUS)
    assert job["status"] == "failed", (job, worker.log()[-4000:])
    assert "3 attempts" in job["error"]
    assert AssemblyJob.objects.get(id=job_id).attempts == 3
    assert not Manifest.objects.filter(job_id=job_id).exists()
