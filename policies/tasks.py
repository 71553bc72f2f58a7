"""The impact preview task: a thin, named, idempotent wrapper around policies.services.

The claim (`queued -> running`, guarded) makes a second delivery a no-op. Inline mode (no
REDIS_URL) calls the same function in-process after the starting request commits.
"""

from __future__ import annotations

from django.conf import settings

from ctxeng.server.celery import app

from .services import impact_preview_run


@app.task(
    name="policies.run_impact_preview",
    acks_late=True,
    # The runner stops starting replays at CTXENG_IMPACT_TIME_LIMIT_SECONDS; one replay of a
    # 20,000-candidate request takes seconds, so these limits only catch a hung replay.
    soft_time_limit=settings.CTXENG_IMPACT_TIME_LIMIT_SECONDS + 60,
    time_limit=settings.CTXENG_IMPACT_TIME_LIMIT_SECONDS + 120,
    ignore_result=True,
)
def run_impact_preview(preview_id: str) -> None:
    impact_preview_run(preview_id=preview_id)
