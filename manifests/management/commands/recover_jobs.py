"""`manage.py recover_jobs`: one stale-job sweep (workers run it on their own; this is for cron/ops)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from manifests.services import assembly_jobs_recover


class Command(BaseCommand):
    help = "Requeue assembly jobs whose worker died, fail those out of attempts, re-send forgotten queued jobs."

    def handle(self, *args, **options) -> None:
        counts = assembly_jobs_recover()
        self.stdout.write(", ".join(f"{k}: {v}" for k, v in counts.items()))
