"""`manage.py purge_content --older-than 30d`: remove content bodies from old manifests.

Keeps hashes, decisions and lineage (see manifests.retention), then deletes from the content
store every blob no kept request, manifest, artifact or item decision refers to (a body another
job still names stays). Run it from cron. Durations: `30d`, `12h`, `90m`, `3600s`.
`--store-only` skips the first step: only what nothing refers to goes.
"""

from __future__ import annotations

import re
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError

from ctxeng.accounts.models import Tenant
from ctxeng.content.store import content_purge
from manifests.services import manifests_purge_content

UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


def parse_age(text: str) -> timedelta:
    match = re.fullmatch(r"\s*([0-9]+)\s*([dhms])\s*", text or "")
    if match is None:
        raise CommandError(f"--older-than: expected a duration such as 30d, 12h, 90m or 3600s, got {text!r}")
    return timedelta(**{UNITS[match.group(2)]: int(match.group(1))})


class Command(BaseCommand):
    help = ("Remove item content bodies from manifests older than the given age (hashes, decisions, lineage "
            "stay), then the content no kept holder refers to.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("--older-than", help="age such as 30d, 12h, 90m")
        parser.add_argument("--store-only", action="store_true", help="only delete content nothing refers to")

    def handle(self, *args, older_than: str | None, store_only: bool, **options) -> None:
        if not store_only:
            if older_than is None:
                raise CommandError("--older-than: required (or --store-only)")
            age = parse_age(older_than)
            purged = manifests_purge_content(older_than=age)
            self.stdout.write(f"purged content of {purged} manifest(s) older than {older_than.strip()}")
        blobs = size = 0
        for tenant in Tenant.objects.order_by("pk"):
            report = content_purge(tenant=tenant)
            blobs, size = blobs + report.deleted, size + report.deleted_bytes
        self.stdout.write(f"content store: deleted {blobs} blob(s), {size} bytes, that nothing refers to")
