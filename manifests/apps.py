"""App config for manifests: connects the Celery worker's start checks and stale-job sweeper, and
checks the OpenTelemetry environment at start (ctxeng.telemetry).

They are connected here, not in ctxeng/celery.py, so the Celery app module imports no Django app
(tasks import the Celery app; nothing imports back). The receivers run only in a worker; web
processes connect them and never see the signals.
"""

from django.apps import AppConfig


class ManifestsConfig(AppConfig):
    name = "manifests"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from celery.signals import worker_init, worker_ready, worker_shutting_down

        from ctxeng import telemetry

        from . import content_holders, worker_startup

        content_holders.register()
        telemetry.check_at_start()  # a protocol it cannot honour: logged now, no span is ever sent

        worker_init.connect(worker_startup.on_worker_init, dispatch_uid="ctxeng.worker_checks")
        worker_ready.connect(worker_startup.on_worker_ready, dispatch_uid="ctxeng.sweeper_start")
        worker_shutting_down.connect(worker_startup.on_worker_shutting_down, dispatch_uid="ctxeng.sweeper_stop")
