"""The stale-job sweeper each Celery worker runs (started at worker_ready by manifests.worker_startup).

It sweeps once when the worker is ready, then every CTXENG_SWEEP_SECONDS, in a daemon thread of
the worker's main process. With the defaults (heartbeat 10 s, stale after 40 s, sweep every 15 s)
a job whose worker was SIGKILLed is requeued at most ~55 s after its last heartbeat, then runs on
a live worker: well inside two minutes.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import connection

logger = logging.getLogger(__name__)

_stop = threading.Event()
_thread: threading.Thread | None = None


def _loop() -> None:
    from .services import assembly_jobs_recover

    while True:
        try:
            assembly_jobs_recover()
        except Exception:  # noqa: BLE001 - the sweeper must outlive a database hiccup
            logger.warning("stale-job sweep failed", exc_info=True)
        finally:
            connection.close()
        if _stop.wait(settings.CTXENG_SWEEP_SECONDS):
            return


def start_sweeper() -> None:
    global _thread
    if _thread is not None and _thread.is_alive():
        return
    _stop.clear()
    _thread = threading.Thread(target=_loop, name="ctxeng-job-sweeper", daemon=True)
    _thread.start()


def stop_sweeper() -> None:
    _stop.set()
