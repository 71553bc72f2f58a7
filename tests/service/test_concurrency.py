"""Concurrency on real components: many submitters, two Celery workers, duplicate deliveries.

- The same Idempotency-Key submitted by many threads at once yields one job (SQLite and PostgreSQL).
- 200 jobs from several agents in two tenants, submitted concurrently to two real Celery workers
  on one Redis broker (PostgreSQL: the database whose row locks and concurrent connections
  production relies on): every job ends final with exactly one manifest, nothing leaks across
  tenants, and re-delivering every message afterwards changes nothing.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

THREADS = 8


def _concurrently(calls: list) -> list:
    """Run the calls in threads released together; each thread closes its own DB connection."""
    from django.db import connection

    barrier = threading.Barrier(len(calls))

    def run(call):
        try:
            barrier.wait()
            return call()
        finally:
            connection.close()

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


def _client(user):
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get(user=user).key}")
    return client


def _post(user, body, key=None):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    response = _client(user).post("/api/v1/assemblies/", body, format="json", **headers)
    return response.status_code, response.json()


@pytest.fixture
def racing(transactional_db, settings, published_policy, agent_user):
    settings.CTXENG_JOBS_INLINE = True
    return agent_user


def test_the_same_idempotency_key_submitted_at_once_yields_one_job(racing, example_request):
    from manifests.models import AssemblyJob, Manifest

    results = _concurrently([lambda: _post(racing, example_request, key="race-1")] * THREADS)
    statuses = Counter(status for status, _ in results)
    assert statuses == {202: 1, 200: THREADS - 1}, results
    assert len({body["id"] for _, body in results}) == 1
    assert AssemblyJob.objects.filter(idempotency_key="race-1").count() == 1
    assert Manifest.objects.filter(job__idempotency_key="race-1").count() == 1


def test_the_same_key_with_different_bodies_at_once_yields_one_job_and_conflicts(racing, example_request):
    from manifests.models import AssemblyJob

    bodies = []
    for n in range(THREADS):
        body = json.loads(json.dumps(example_request))
        body["step_id"] = f"step-race-{n}"
        bodies.append(body)
    results = _concurrently([lambda b=b: _post(racing, b, key="race-2") for b in bodies])
    statuses = Counter(status for status, _ in results)
    assert statuses == {202: 1, 409: THREADS - 1}, results
    assert AssemblyJob.objects.filter(idempotency_key="race-2").count() == 1
    assert all("Idempotency-Key 'race-2'" in body["errors"][0] for status, body in results if status == 409)


# --------------------------------------------------------------------------- 200 jobs, two workers


def _tenant_request(example_request: dict, tenant: str, n: int) -> dict:
    body = json.loads(json.dumps(example_request).replace("tenant-x", tenant))
    body["run_id"] = f"run-{tenant}-{n % 10}"
    body["step_id"] = f"step-{n}"
    return body


@pytest.mark.slow
@pytest.mark.postgres_only
def test_two_hundred_concurrent_jobs_on_two_workers_end_once_each_without_leaking(
    start_worker, published_policy, example_request, example_policy_text, redis_url
):
    import redis
    from django.contrib.auth import get_user_model

    from ctxeng.accounts.models import Tenant
    from ctxeng.accounts.services import tenant_member_add
    from manifests.models import FINAL_STATUSES, AssemblyJob, Manifest, ManifestItem
    from manifests.selectors import job_request, manifest_document
    from manifests.tasks import run_assembly_job
    from policies.services import policy_import

    agents = {}
    for tenant in ("tenant-x", "tenant-z"):
        for n in (1, 2):
            name = f"{tenant}-agent-{n}"
            tenant_member_add(username=name, tenant_slug=tenant, roles=["agent", "reviewer"])
            agents[name] = (tenant, get_user_model().objects.get(username=name))
    policy_import(tenant=Tenant.objects.get(slug="tenant-z"), text=example_policy_text, user=None, publish=True)

    workers = [start_worker(), start_worker()]
    names = sorted(agents)
    calls = []
    for n in range(200):
        tenant, user = agents[names[n % len(names)]]
        body = _tenant_request(example_request, tenant, n)
        calls.append(lambda user=user, body=body, n=n: _post(user, body, key=f"job-{n}"))
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda call: _close_after(call), calls))
    assert Counter(status for status, _ in results) == {202: 200}, results[:3]
    ids = [body["id"] for _, body in results]

    deadline = time.monotonic() + 240
    while AssemblyJob.objects.filter(id__in=ids).exclude(status__in=FINAL_STATUSES).exists():
        assert time.monotonic() < deadline, [w.log()[-2000:] for w in workers]
        time.sleep(0.5)

    # Every message delivered again: each must be a no-op (the guarded claim refuses it).
    before = {str(j.id): (j.status, j.attempts, j.finished_at) for j in AssemblyJob.objects.filter(id__in=ids)}
    for job_id in ids:
        run_assembly_job.apply_async(args=[job_id])
    broker = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + 60
    while broker.llen("celery"):
        assert time.monotonic() < deadline, "duplicate deliveries were not consumed"
        time.sleep(0.2)
    time.sleep(1)  # the last prefetched duplicates finish their (refused) claim
    after = {str(j.id): (j.status, j.attempts, j.finished_at) for j in AssemblyJob.objects.filter(id__in=ids)}
    assert after == before

    jobs = list(AssemblyJob.objects.filter(id__in=ids).select_related("tenant", "manifest"))
    assert Counter(job.status for job in jobs) == {"ready": 200}, Counter(job.error for job in jobs)
    assert all(job.attempts == 1 for job in jobs)
    assert Manifest.objects.filter(job_id__in=ids).count() == 200
    for job in jobs:
        manifest = job.manifest
        assert job_request(job)["principal"]["tenant"] == job.tenant.slug
        # The example carries one foreign-scope candidate on purpose; nothing foreign is ever included.
        document = manifest_document(manifest)
        scopes = {c["scope"] for c in document["included"] if c.get("scope")}
        assert scopes and all(scope.startswith(job.tenant.slug + "/") for scope in scopes), scopes
        decided = len(document["included"]) + len(document["excluded"])
        assert ManifestItem.objects.filter(manifest=manifest).count() == decided
    assert len({job.claimed_by for job in jobs}) == 2, "both workers took jobs"

    for name, (tenant, user) in agents.items():
        client = _client(user)
        listed = client.get("/api/v1/assemblies/?limit=500").json()["results"]
        assert len(listed) == 100 and {job["tenant"] for job in listed} == {tenant}, name
        other = next(job for job in jobs if job.tenant.slug != tenant)
        assert client.get(f"/api/v1/assemblies/{other.id}/").status_code == 404
        assert client.get(f"/api/v1/assemblies/{other.id}/manifest/").status_code == 404


def _close_after(call):
    from django.db import connection

    try:
        return call()
    finally:
        connection.close()
