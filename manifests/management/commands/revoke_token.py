"""`manage.py revoke_token USERNAME` or `manage.py revoke_token --key KEY`: the token gets 401 from then on."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from ctxeng.accounts.services import token_revoke
from ctxeng.audit.services import cli_actor
from ctxeng.server.errors import NotFound


class Command(BaseCommand):
    help = "Revoke a user's API token (by username or by key); recorded in the audit trail."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username", nargs="?", help="the token's owner")
        parser.add_argument("--key", help="the token itself, when the owner is not known")

    def handle(self, *args, username: str | None, key: str | None, **options) -> None:
        if (username is None) == (key is None):
            raise CommandError("give either USERNAME or --key KEY")
        try:
            token = token_revoke(username=username, key=key, actor=None, actor_name=cli_actor())
        except NotFound as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"revoked the token of {token.user.get_username()}")
