"""The impact preview task: a thin, named, idempotent wrapper around policies.services.

The claim (`queued -> running`, guarded) makes a second delivery a no-op. Inline mode (no
REDIS_URL) calls the same function in-process after the starting request commits. With fair
dispatch (ctxeng.server.fair_queue) a message is a turn, which may run another tenant's job.
"""

from __future__ import annotations

import time

from django.conf import settings

from ctxeng.server import fair_queue
from ctxeng.server.celery import app

from .models import ImpactPreview, PreviewStatus
from .services import impact_preview_run


@app.task(
    bind=True,
    name="policies.run_impact_preview",
    Request=fair_queue.TurnRequest,  # a lost pool process frees its slots at once
    acks_late=True,
    # The runner stops starting replays at CTXENG_IMPACT_TIME_LIMIT_SECONDS; one replay of a
    # 20,000-candidate request takes seconds, so these limits only catch a hung replay. A turn may
    # run an assembly job instead (fair dispatch): the limits cover either (settings).
    soft_time_limit=settings.CTXENG_TURN_SOFT_TIME_LIMIT,
    time_limit=settings.CTXENG_TURN_TIME_LIMIT,
    ignore_result=True,
)
def run_impact_preview(self, preview_id: str) -> None:
    fair_queue.run_turn(
        kind="preview", item_id=preview_id, traceparent=None,
        requeue=lambda countdown: self.apply_async(args=[preview_id], countdown=countdown),
    )


def _run(preview_id: str, traceparent: str | None) -> None:
    if settings.CTXENG_TEST_PREVIEW_SLEEP_SECONDS and not settings.CTXENG_JOBS_INLINE:  # a test hook
        time.sleep(settings.CTXENG_TEST_PREVIEW_SLEEP_SECONDS)
    impact_preview_run(preview_id=preview_id)


def _waiting_tenant(preview_id: str) -> int | None:
    return (ImpactPreview.objects.filter(id=preview_id, status=PreviewStatus.QUEUED)
            .values_list("revision__policy__tenant_id", flat=True).first())


fair_queue.register("preview", _run, _waiting_tenant)
