"""The Celery app: `celery -A ctxeng worker` (Celery finds it through the entry point `ctxeng.celery`).

Celery finds this module from the package name, so `ctxeng/__init__.py` stays free of Django and
Celery imports and `import ctxeng.engine` loads neither. Configuration comes from Django settings
(`CELERY_*`, derived from `REDIS_URL`); tasks are discovered from the installed apps. This module
imports no Django app: the worker's start checks and its stale-job sweeper are connected by
`manifests.apps` (see manifests.worker_startup), so the task modules that import `app` form no
import cycle with it. Each pool process attaches the Redis token cache (ctxeng.server.token_cache) to the
engine's tokenizers (one per encoding), so a count any worker made is reused by every other one, and a restarted
worker does not start cold.

A worker's events go out through `WorkerEvents`: its heartbeat gives up after one reconnect
instead of retrying for as long as the broker is away (see `BoundedRetryDispatcher`).
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.app.events import Events
from celery.events.dispatcher import EventDispatcher
from celery.signals import worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxeng.server.settings")

# One reconnect at once, then the event is buffered (the dispatcher's buffer_while_offline) and
# sent with the others after the consumer reconnects.
EVENT_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 1, "interval_max": 1}


class BoundedRetryDispatcher(EventDispatcher):
    """Events sent with `retry` and no policy (the worker's heartbeat, every 2 s, in the main
    process's event loop) retry by EVENT_RETRY_POLICY, not forever.

    Celery's heartbeat asks kombu to retry with no limit, silently. When the broker went away just
    before a heartbeat was due, the worker's main process stayed in that retry for the whole
    outage: it logged nothing, did not notice the lost connection (so never "Cannot connect"),
    acknowledged no finished job and ignored a warm shutdown (SIGTERM) until the broker came back
    (issue 51, N2; tests/service/test_broker_restart.py). Bounded, the heartbeat gives up within a
    reconnect, and the event loop goes on to find the connection lost and reconnect as it does
    for any other outage."""

    def publish(self, type: str, fields: dict[str, Any], producer: Any, blind: bool = False, **kwargs: Any) -> Any:
        if kwargs.get("retry") and not kwargs.get("retry_policy"):
            kwargs["retry_policy"] = EVENT_RETRY_POLICY
        return super().publish(type, fields, producer, blind=blind, **kwargs)


class WorkerEvents(Events):
    """`app.events`, with BoundedRetryDispatcher as its Dispatcher."""

    dispatcher_cls = "ctxeng.server.celery:BoundedRetryDispatcher"


app = Celery("ctxeng", events="ctxeng.server.celery:WorkerEvents")
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
