"""The assembly task: a thin, named, idempotent wrapper around manifests.services.

Delivered at least once (acks_late; a message whose worker died is requeued): the guarded claim
makes every later delivery of a job that is running or done a no-op. Inline mode (no REDIS_URL)
calls the same function in-process.
"""

from __future__ import annotations

import os
import signal
import time

from django.conf import settings

from ctxeng.server.celery import app

from .models import AssemblyJob
from .services import assembly_job_assemble, assembly_job_claim, assembly_job_heartbeat


@app.task(
    name="manifests.run_assembly_job",
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=settings.CTXENG_JOB_SOFT_TIME_LIMIT,
    time_limit=settings.CTXENG_JOB_TIME_LIMIT,
    ignore_result=True,
)
def run_assembly_job(job_id: str, traceparent: str | None = None) -> str | None:
    attempt = assembly_job_claim(job_id=job_id)
    if attempt is None:
        return None
    with assembly_job_heartbeat(job_id=job_id, attempt=attempt):
        _test_hooks(job_id)
        return assembly_job_assemble(job_id=job_id, attempt=attempt, traceparent=traceparent)


def _test_hooks(job_id: str) -> None:
    """Worker-crash test hooks (settings CTXENG_TEST_*); inert unless a test sets them."""
    if settings.CTXENG_TEST_CRASH_RUN_ID and not settings.CTXENG_JOBS_INLINE:
        run_id = AssemblyJob.objects.filter(id=job_id).values_list("run__run_id", flat=True).first()
        if run_id == settings.CTXENG_TEST_CRASH_RUN_ID:
            os.kill(os.getpid(), signal.SIGKILL)
    if settings.CTXENG_TEST_TASK_SLEEP_SECONDS:
        time.sleep(settings.CTXENG_TEST_TASK_SLEEP_SECONDS)
