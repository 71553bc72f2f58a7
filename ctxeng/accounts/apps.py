"""App config for tenancy and people (tenants, memberships, roles, API tokens)."""

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "ctxeng.accounts"
    label = "accounts"
    default_auto_field = "django.db.models.BigAutoField"
