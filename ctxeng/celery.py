"""The Celery entry point `celery -A ctxeng worker` finds (Celery looks for `ctxeng.celery`): the app
itself is `ctxeng.server.celery.app`, with the rest of the Django project's plumbing."""

from ctxeng.server.celery import app

__all__ = ["app"]
