"""Site-wide views: the dashboard home page (recent runs, blocked assemblies), a health check, and the
404/500 handlers (JSON under /api/)."""

from __future__ import annotations

import logging

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from django.views.defaults import page_not_found
from django.views.defaults import server_error as django_server_error

from manifests import dashboard_selectors
from manifests.models import JobStatus
from manifests.views import dashboard_page

logger = logging.getLogger(__name__)


@require_GET
@dashboard_page
def home(request: HttpRequest) -> HttpResponse:
    tenant = request.tenancy.current
    context = {"recent_runs": [], "blocked": []}
    if tenant is not None:
        context = {
            "recent_runs": list(dashboard_selectors.runs_list(tenant=tenant)[:10]),
            "blocked": dashboard_selectors.recent_jobs(tenant=tenant, status=JobStatus.BLOCKED, limit=10),
        }
    return render(request, "ctxeng/home.html", context)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """404 for a URL no route matches: JSON `{"errors": [...]}` under /api/, the HTML page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"errors": [f"{request.path}: not found"]}, status=404)
    return page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """500 outside DRF's handler (a middleware failure): JSON under /api/, never a traceback."""
    if request.path.startswith("/api/"):
        return JsonResponse({"errors": ["internal error; the server log has details"]}, status=500)
    return django_server_error(request)


def healthz(request: HttpRequest) -> JsonResponse:
    """`{"status": "ok"}` (200) or `{"status": "unavailable"}` (503), to anyone.

    The database's own error names hosts, ports and users, so it goes to the log only: the
    endpoint is unauthenticated, for load balancers.
    """
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:  # noqa: BLE001 - the health check reports any database failure
        logger.exception("healthz: the database is unreachable")
        return JsonResponse({"status": "unavailable"}, status=503)
    return JsonResponse({"status": "ok"})
