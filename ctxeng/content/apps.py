"""App config for the content store (content-addressed blobs per tenant)."""

from django.apps import AppConfig


class ContentConfig(AppConfig):
    name = "ctxeng.content"
    label = "content"
    default_auto_field = "django.db.models.BigAutoField"
