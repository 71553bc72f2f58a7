"""App config for tenancy and people (tenants, memberships, roles, API tokens) and each user's
dashboard settings (the time display, copied into the session at login)."""

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "ctxeng.accounts"
    label = "accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in

        from .time_display import remember_on_login

        user_logged_in.connect(remember_on_login, dispatch_uid="ctxeng.accounts.time_display")
