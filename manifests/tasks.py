"""The assembly task and the recorded-step verification task: thin, named, idempotent wrappers
around manifests.services.

Delivered at least once (acks_late; a message whose worker died is requeued): the guarded claim
makes every later delivery of a job that is running or done a no-op. Inline mode (no REDIS_URL)
calls the same function in-process. With fair dispatch (ctxeng.server.fair_queue) a message is a
turn: it runs the job or preview whose tenant's turn it is, which may not be the job it names.
"""

from __future__ import annotations

import os
import signal
import time

from django.conf import settings

from ctxeng.server import fair_queue
from ctxeng.server.celery import app

from .models import AssemblyJob, JobStatus, Verification
from .services import assembly_job_assemble, assembly_job_claim, assembly_job_heartbeat, recorded_step_verify


@app.task(
    bind=True,
    name="manifests.run_assembly_job",
    Request=fair_queue.TurnRequest,  # a lost pool process frees its slots at once
    acks_late=True,
    reject_on_worker_lost=True,
    # A turn may run an impact preview instead (fair dispatch): the limits cover either (settings).
    soft_time_limit=settings.CTXENG_TURN_SOFT_TIME_LIMIT,
    time_limit=settings.CTXENG_TURN_TIME_LIMIT,
    ignore_result=True,
)
def run_assembly_job(self, job_id: str, traceparent: str | None = None) -> str | None:
    return fair_queue.run_turn(
        kind="assembly", item_id=job_id, traceparent=traceparent,
        requeue=lambda countdown: self.apply_async(args=[job_id], kwargs=self.request.kwargs, countdown=countdown),
    )


def _run(job_id: str, traceparent: str | None) -> str | None:
    attempt = assembly_job_claim(job_id=job_id)
    if attempt is None:
        return None
    with assembly_job_heartbeat(job_id=job_id, attempt=attempt):
        _test_hooks(job_id)
        return assembly_job_assemble(job_id=job_id, attempt=attempt, traceparent=traceparent)


def _waiting_tenant(job_id: str) -> int | None:
    return AssemblyJob.objects.filter(id=job_id, status=JobStatus.QUEUED).values_list("tenant_id", flat=True).first()


fair_queue.register("assembly", _run, _waiting_tenant)


@app.task(
    bind=True,
    name="manifests.verify_recorded_step",
    Request=fair_queue.TurnRequest,  # a lost pool process frees its slots at once
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=settings.CTXENG_TURN_SOFT_TIME_LIMIT,
    time_limit=settings.CTXENG_TURN_TIME_LIMIT,
    ignore_result=True,
)
def verify_recorded_step(self, job_id: str) -> str | None:
    """Re-assemble a step an agent recorded and record verified / diverged / unverifiable; a
    turn of fair dispatch like an assembly (the verification is idempotent, see the service)."""
    return fair_queue.run_turn(
        kind="verification", item_id=job_id, traceparent=None,
        requeue=lambda countdown: self.apply_async(args=[job_id], countdown=countdown),
    )


def _unverified_tenant(job_id: str) -> int | None:
    return (AssemblyJob.objects.filter(id=job_id, verification=Verification.PENDING)
            .values_list("tenant_id", flat=True).first())


fair_queue.register("verification", lambda job_id, traceparent: recorded_step_verify(job_id=job_id),
                    _unverified_tenant)


def _test_hooks(job_id: str) -> None:
    """Worker-crash test hooks (settings CTXENG_TEST_*); inert unless a test sets them."""
    run_id = None
    if (settings.CTXENG_TEST_CRASH_RUN_ID or settings.CTXENG_TEST_TASK_SLEEP_RUN_ID) and not settings.CTXENG_JOBS_INLINE:
        run_id = AssemblyJob.objects.filter(id=job_id).values_list("run__run_id", flat=True).first()
    if settings.CTXENG_TEST_CRASH_RUN_ID and run_id == settings.CTXENG_TEST_CRASH_RUN_ID:
        os.kill(os.getpid(), signal.SIGKILL)
    if settings.CTXENG_TEST_TASK_SLEEP_SECONDS and settings.CTXENG_TEST_TASK_SLEEP_RUN_ID in ("", run_id):
        time.sleep(settings.CTXENG_TEST_TASK_SLEEP_SECONDS)
