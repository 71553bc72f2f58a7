"""Site-wide views: a placeholder home page (the dashboard replaces it) and a health check."""

from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse


def home(request: HttpRequest) -> HttpResponse:
    return HttpResponse(
        "<!doctype html><title>ctxeng</title><h1>ctxeng</h1>"
        '<p>REST API under <a href="/api/v1/">/api/v1/</a>; '
        'docs at <a href="/api/docs/">/api/docs/</a>.</p>',
    )


def healthz(request: HttpRequest) -> JsonResponse:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - the health check reports any database failure
        return JsonResponse({"status": "error", "database": str(exc)}, status=503)
    return JsonResponse({"status": "ok"})
