"""`manage.py purge_content --older-than 30d`: remove content bodies from old manifests.

Keeps hashes, decisions and lineage (see manifests.retention); run it from cron. Durations:
`30d`, `12h`, `90m`, `3600s`.
"""

from __future__ import annotations

import re
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError

from manifests.services import manifests_purge_content

UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


def parse_age(text: str) -> timedelta:
    match = re.fullmatch(r"\s*(\d+)\s*([dhms])\s*", text or "")
    if match is None:
        raise CommandError(f"--older-than: expected a duration such as 30d, 12h, 90m or 3600s, got {text!r}")
    return timedelta(**{UNITS[match.group(2)]: int(match.group(1))})


class Command(BaseCommand):
    help = "Remove item content bodies from manifests older than the given age (hashes, decisions, lineage stay)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--older-than", required=True, help="age such as 30d, 12h, 90m")

    def handle(self, *args, older_than: str, **options) -> None:
        age = parse_age(older_than)
        purged = manifests_purge_content(older_than=age)
        self.stdout.write(f"purged content of {purged} manifest(s) older than {older_than.strip()}")
