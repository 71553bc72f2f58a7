"""App config for manifests: registers what the apps below it read of assemblies and quotas
(policies.assemblies, ctxeng.accounts.usage), connects the Celery worker's start checks and stale-job sweeper, and
checks the OpenTelemetry environment at start (ctxeng.telemetry).

They are connected here, not in ctxeng/server/celery.py, so the Celery app module imports no Django app
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
        from ctxeng.accounts import usage
        from policies import assemblies

        from . import assembly_records, content_holders, quotas, worker_startup

        content_holders.register()
        assemblies.register(assembly_records)  # what policies reads of recorded assemblies (policies.assemblies)
        usage.register(quotas.tenant_usage)  # the people page's quotas (ctxeng.accounts.usage)
        telemetry.check_at_start()  # a protocol it cannot honour: logged now, no span is ever sent

        worker_init.connect(worker_startup.on_worker_init, dispatch_uid="ctxeng.worker_checks")
        worker_ready.connect(worker_startup.on_worker_ready, dispatch_uid="ctxeng.sweeper_start")
        worker_shutting_down.connect(worker_startup.on_worker_shutting_down, dispatch_uid="ctxeng.sweeper_stop")
