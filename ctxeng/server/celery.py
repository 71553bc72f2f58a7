"""The Celery app: `celery -A ctxeng worker` (Celery finds it through the entry point `ctxeng.celery`).

Celery finds this module from the package name, so `ctxeng/__init__.py` stays free of Django and
Celery imports and `import ctxeng.engine` loads neither. Configuration comes from Django settings
(`CELERY_*`, derived from `REDIS_URL`); tasks are discovered from the installed apps. This module
imports no Django app: the worker's start checks and its stale-job sweeper are connected by
`manifests.apps` (see manifests.worker_startup), so the task modules that import `app` form no
import cycle with it. Each pool process attaches the Redis token cache (ctxeng.server.token_cache) to the
engine's tokenizers (one per encoding), so a count any worker made is reused by every other one, and a restarted
worker does not start cold.
"""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxeng.server.settings")

app = Celery("ctxeng")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_init.connect
def _share_token_counts(sender=None, **kwargs) -> None:
    """In each pool process (after the fork: a Redis connection must not cross it)."""
    from django.conf import settings

    if not settings.REDIS_URL:
        return
    from ctxeng.server.token_cache import share_through_redis

    share_through_redis(settings.REDIS_URL)  # every encoding's tokenizer, each under its own keys
