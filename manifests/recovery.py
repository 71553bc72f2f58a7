"""The stale-job sweeper each Celery worker runs (started at worker_ready by manifests.worker_startup).

It sweeps once when the worker is ready, then every CTXENG_SWEEP_SECONDS, in a daemon thread of
the worker's main process. With the defaults (heartbeat 10 s, stale after 40 s, sweep every 15 s)
a job whose worker was SIGKILLed is requeued at most ~55 s after its last heartbeat, then runs on
a live worker: well inside two minutes.

The pool forks its processes from this same main process, at any moment (a replacement for a
process that died, too). A fork taken while the sweeper thread is inside the database driver can
leave the child holding a lock nobody will release: on SQLite the child then hangs at its first
query (the crash-consistency test caught it). So a fork waits for the sweep in progress to end
(`os.register_at_fork`), and a sweep never overlaps a fork.
"""

from __future__ import annotations

import logging
import os
import threading

from django.conf import settings
from django.db import connection

logger = logging.getLogger(__name__)

_stop = threading.Event()
_thread: threading.Thread | None = None
# Held by the sweeper while it uses the database, and by a forking thread around each fork.
_database_in_use = threading.Lock()
_fork_hooks_registered = False
# A sweep stuck on an unreachable database must not stop the pool from forking for ever.
_FORK_WAIT_SECONDS = 30.0
_held_for_fork: list[bool] = []


def _before_fork() -> None:
    _held_for_fork.append(_database_in_use.acquire(timeout=_FORK_WAIT_SECONDS))


def _after_fork() -> None:
    if _held_for_fork and _held_for_fork.pop():
        _database_in_use.release()


def _loop() -> None:
    from .services import assembly_jobs_recover

    while True:
        with _database_in_use:
            try:
                assembly_jobs_recover()
            except Exception:  # noqa: BLE001 - the sweeper must outlive a database hiccup
                logger.warning("stale-job sweep failed", exc_info=True)
            finally:
                connection.close()
        if _stop.wait(settings.CTXENG_SWEEP_SECONDS):
            return


def start_sweeper() -> None:
    global _thread, _fork_hooks_registered
    if _thread is not None and _thread.is_alive():
        return
    if not _fork_hooks_registered:
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)
        _fork_hooks_registered = True
    _stop.clear()
    _thread = threading.Thread(target=_loop, name="ctxeng-job-sweeper", daemon=True)
    _thread.start()


def stop_sweeper() -> None:
    _stop.set()
