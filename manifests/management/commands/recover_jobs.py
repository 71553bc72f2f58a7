"""`manage.py recover_jobs`: one stale-job sweep; `--every SECONDS`: the sweeper process, sweeping
until stopped.

The sweep must not depend on the workers it repairs: a broker restart that made every worker exit
(issue 51, N2) left their sweeper threads dead with them, and the jobs queued meanwhile stayed
queued until a person restarted the workers. So production runs this loop as a process of its own
(deploy/ctxeng-sweeper.service), beside the workers' own sweepers; it needs the database and the
broker, not a live worker. Concurrent sweeps are safe: each change is a guarded update and only the
sweeper whose update matched re-sends (manifests.services.assembly_jobs_recover). A failed sweep
(the database or the broker away) is logged and tried again at the next interval; the loop never
exits on its own.
"""

from __future__ import annotations

import logging
import signal
import threading

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from manifests.services import assembly_jobs_recover

logger = logging.getLogger(__name__)


def positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise CommandError(f"--every: expected a positive number of seconds, got {text!r}", returncode=2)
    return seconds


class Command(BaseCommand):
    help = ("Requeue assembly jobs whose worker died, fail those out of attempts, re-send forgotten queued jobs; "
            "with --every, keep sweeping (the sweeper process).")

    def add_arguments(self, parser) -> None:
        parser.add_argument("--every", metavar="SECONDS", type=str, default=None,
                            help="sweep every SECONDS until SIGTERM/SIGINT (production: 15, CTXENG_SWEEP_SECONDS)")

    def handle(self, *args, every: str | None = None, **options) -> None:
        if every is None:
            self.stdout.write(_line(assembly_jobs_recover()))
            return
        interval = positive_seconds(every)
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        self.stdout.write(f"sweeper: sweeping every {interval:g} s", ending="\n")
        self.stdout.flush()
        while not stop.is_set():
            try:
                assembly_jobs_recover()  # logs what it did
            except Exception:  # noqa: BLE001 - the sweeper outlives a database or broker outage
                logger.warning("stale-job sweep failed; trying again in %g s", interval, exc_info=True)
            finally:
                connection.close()
            stop.wait(interval)


def _line(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in counts.items())
