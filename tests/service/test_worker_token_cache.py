"""A Celery worker process shares its token counts through Redis (ctxeng.server.celery attaches the cache)."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.slow


def test_a_worker_process_assembly_stores_its_token_counts_in_redis(
    start_worker, celery_jobs, published_policy, agent_api, example_request
):
    import redis

    from manifests.models import AssemblyJob

    client = redis.Redis.from_url(celery_jobs)
    for key in client.scan_iter(match="ctxeng:tok:*"):
        client.delete(key)
    worker = start_worker()
    job_id = agent_api.post("/api/v1/assemblies/", example_request, format="json").json()["id"]
    deadline = time.monotonic() + 60
    while AssemblyJob.objects.get(id=job_id).status not in ("ready", "blocked", "failed"):
        assert time.monotonic() < deadline, worker.log()
        time.sleep(0.1)

    assert AssemblyJob.objects.get(id=job_id).status == "ready", worker.log()
    keys = list(client.scan_iter(match="ctxeng:tok:*"))
    assert keys, "the worker process counted tokens without writing them to the shared cache"
    assert all(int(client.get(key)) >= 0 for key in keys)
