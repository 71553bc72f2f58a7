"""`manage.py issue_token USERNAME --tenant T --role R [--role R ...]`: prints the API token last."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from ctxeng.accounts.models import Role
from ctxeng.accounts.services import tenant_member_add
from ctxeng.audit.services import cli_actor


class Command(BaseCommand):
    help = "Create the user, tenant and memberships if needed, and print the user's API token."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username", help="the token's owner (created if missing)")
        parser.add_argument("--tenant", required=True, help="tenant slug (created if missing)")
        parser.add_argument(
            "--role", action="append", required=True, choices=Role.values, help="repeat for several roles"
        )

    def handle(self, *args, username: str, tenant: str, role: list[str], **options) -> None:
        try:
            token = tenant_member_add(
                username=username, tenant_slug=tenant, roles=role, actor_name=cli_actor()
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{username} in {tenant} as {', '.join(sorted(set(role)))}")
        self.stdout.write(token.key)
