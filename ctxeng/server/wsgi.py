"""WSGI entry point: `gunicorn ctxeng.server.wsgi`."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxeng.server.settings")

application = get_wsgi_application()
