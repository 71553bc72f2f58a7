"""`manage.py import_policy FILE --tenant T [--publish]`: import a YAML/JSON policy revision."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from ctxeng.accounts.models import Tenant
from ctxeng.engine import InvalidInput
from ctxeng.server.errors import ServiceError
from policies.services import policy_import


class Command(BaseCommand):
    help = "Import a policy file as a revision (idempotent); --publish makes it the current revision."

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", type=Path, help="a ContextPolicy YAML or JSON file")
        parser.add_argument("--tenant", required=True, help="slug of the tenant the policy belongs to")
        parser.add_argument("--publish", action="store_true", help="make the imported revision the current one")
        parser.add_argument("--note", default="imported from file", help="the revision's change note")

    def handle(self, *args, file: Path, tenant: str, publish: bool, note: str, **options) -> None:
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"{file}: {exc}") from None
        owner, _ = Tenant.objects.get_or_create(slug=tenant, defaults={"name": tenant})
        try:
            revision = policy_import(tenant=owner, text=text, user=None, publish=publish, note=note)
        except InvalidInput as exc:
            raise CommandError(f"{file}: invalid policy:\n  " + "\n  ".join(exc.errors)) from None
        except ServiceError as exc:
            raise CommandError(f"{file}: {exc}") from None
        self.stdout.write(
            f"{revision.policy.policy_id} revision {revision.revision}: {revision.status} ({revision.digest})"
        )
