"""What a Celery worker does at start and stop, connected to Celery's signals by ManifestsConfig.ready().

At `worker_init` (before the pool forks, before anything is consumed) the worker checks that it can
do its job: the OpenTelemetry protocol, when traces are on, is one it can export (ctxeng.telemetry),
the database answers and has every migration applied, and the broker (REDIS_URL) accepts a
connection. If not, it exits non-zero with one line naming what is wrong (the variable and the fix,
or what is unreachable, without credentials), instead of logging "ready", taking jobs and failing
each of them (or sending their traces where no collector listens for that protocol). At
`worker_ready` it starts the stale-job sweeper (manifests.recovery), and stops it at
`worker_shutting_down`.
"""

from __future__ import annotations

import sys

from django.conf import settings
from django.db import connection

EXIT_UNAVAILABLE = 69  # sysexits.h EX_UNAVAILABLE: a service the program needs is not there

BROKER_ATTEMPTS = 3


class WorkerCannotStart(Exception):
    pass


def database_label() -> str:
    """The database as an operator would name it, without user or password."""
    conf = connection.settings_dict
    if conf["ENGINE"].endswith("sqlite3"):
        return f"sqlite {conf['NAME']}"
    host = conf.get("HOST") or "localhost"
    port = f":{conf['PORT']}" if conf.get("PORT") else ""
    return f"{connection.vendor} {host}{port}/{conf.get('NAME') or ''}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def check_database() -> None:
    from django.db.migrations.executor import MigrationExecutor

    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception as exc:  # noqa: BLE001 - any failure to reach the database stops the worker
        raise WorkerCannotStart(f"the database ({database_label()}) is unreachable: {_first_line(exc)}") from exc
    finally:
        connection.close()  # never carry a connection across the pool's fork
    if pending:
        raise WorkerCannotStart(
            f"the database ({database_label()}) has {len(pending)} unapplied migration(s), "
            f"first {pending[0][0].app_label}.{pending[0][0].name}: run `manage.py migrate`"
        )


def check_broker(app) -> None:
    if not settings.REDIS_URL:
        raise WorkerCannotStart("REDIS_URL is not set: jobs run in the web process, a worker would receive none")
    with app.connection_for_write() as conn:
        label = conn.as_uri()  # kombu masks the password
        try:
            conn.ensure_connection(max_retries=BROKER_ATTEMPTS, interval_start=1, interval_step=1, interval_max=2)
        except Exception as exc:  # noqa: BLE001 - any failure to reach the broker stops the worker
            raise WorkerCannotStart(f"the broker ({label}) is unreachable: {_first_line(exc)}") from exc


def check_telemetry() -> None:
    """Traces asked for over a protocol this worker cannot speak: refuse, never send to the wrong port."""
    from ctxeng import telemetry

    try:
        telemetry.check()
    except telemetry.ConfigurationError as exc:
        raise WorkerCannotStart(str(exc)) from None


def on_worker_init(sender=None, **kwargs) -> None:
    """Celery's `worker_init`. Celery logs and swallows a receiver's exception, so a failed check
    exits here, with SystemExit, which it lets through."""
    try:
        check_telemetry()
        check_database()
        check_broker(sender.app)
    except WorkerCannotStart as exc:
        print(f"ctxeng worker cannot start: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_UNAVAILABLE) from None


def on_worker_ready(sender=None, **kwargs) -> None:
    from .recovery import start_sweeper

    start_sweeper()


def on_worker_shutting_down(sender=None, **kwargs) -> None:
    from .recovery import stop_sweeper

    stop_sweeper()
