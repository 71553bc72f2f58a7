"""The Celery app: `celery -A ctxeng worker` (or, explicitly, `celery -A ctxeng.celery worker`).

Celery finds this module from the package name, so `ctxeng/__init__.py` stays free of Django and
Celery imports and `import ctxeng.engine` loads neither. Configuration comes from Django settings
(`CELERY_*`, derived from `REDIS_URL`). Each worker, once ready, starts the stale-job sweeper
(manifests.recovery) that requeues jobs whose worker died mid-run.
"""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_ready, worker_shutting_down

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxeng.settings")

app = Celery("ctxeng")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["manifests"])


@worker_ready.connect
def _start_sweeper(sender=None, **kwargs) -> None:
    from manifests.recovery import start_sweeper

    start_sweeper()


@worker_shutting_down.connect
def _stop_sweeper(sender=None, **kwargs) -> None:
    from manifests.recovery import stop_sweeper

    stop_sweeper()
