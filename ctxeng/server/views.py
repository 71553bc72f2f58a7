"""Site-wide views: a health check, the favicon, and the
404/403/500 handlers: JSON `{"errors": [...]}` under /api/, the styled pages (templates/404.html,
403.html, 500.html, which load nothing inline and so render under the CSP) elsewhere. In DEBUG,
ctxeng.server.error_pages routes to the same handlers instead of Django's technical pages."""

from __future__ import annotations

import logging
import sys

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.shortcuts import render
from django.template import loader
from django.templatetags.static import static
from django.views.decorators.http import require_GET

logger = logging.getLogger(__name__)


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico on pages that name no icon (the API's JSON, Swagger UI): the
    dashboard's icon (its static URL resolved per request, so it follows the hashed name)."""
    return HttpResponsePermanentRedirect(static("ctxeng/favicon.svg"))


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """404: JSON `{"errors": [...]}` under /api/, the styled page elsewhere (the path, never the
    exception's text, which can name a resolver's patterns)."""
    if _is_api(request):
        return JsonResponse({"errors": [f"{request.path}: not found"]}, status=404)
    return render(request, "404.html", {"request_path": request.path}, status=404)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """400 for a `BadRequest` a view raised (`BadRequest("from: expected a whole number ...")`):
    its message names the parameter; JSON under /api/."""
    problem = str(exception) if exception is not None and str(exception) else "bad request"
    if _is_api(request):
        return JsonResponse({"errors": [problem]}, status=400)
    return render(request, "ctxeng/bad_request.html", {"problem": problem}, status=400)


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """403: the reason a view gave (`PermissionDenied("the policy_editor role is required")`)."""
    reason = str(exception) if exception is not None and str(exception) else ""
    if _is_api(request):
        return JsonResponse({"errors": [reason or "permission denied"]}, status=403)
    return render(request, "403.html", {"reason": reason}, status=403)


def database_unavailable(exception: BaseException | None) -> bool:
    """Whether an exception says the database cannot be reached now (connection refused, a
    terminated backend, a locked SQLite file), as opposed to a query the database refused.

    psycopg reports a dropped connection as OperationalError or InterfaceError; PostgreSQL's own
    refusals of a statement (a constraint, bad data) are IntegrityError/DataError, never these.
    """
    return isinstance(exception, (OperationalError, InterfaceError))


def service_unavailable(request: HttpRequest) -> HttpResponse:
    """503 with Retry-After for a database outage: nothing was written (the transaction did not
    commit), so the client may retry the same request, with the same Idempotency-Key."""
    retry_after = str(settings.CTXENG_OUTAGE_RETRY_AFTER_SECONDS)
    if _is_api(request):
        response: HttpResponse = JsonResponse(
            {"errors": [f"the database is unavailable; retry in {retry_after} s (the request was not applied)"]},
            status=503)
    else:
        response = HttpResponse(loader.get_template("503.html").render({"retry_after": retry_after}), status=503)
    response["Retry-After"] = retry_after
    return response


def server_error(request: HttpRequest, *, debug_exception: str = "") -> HttpResponse:
    """500 outside DRF's handler: JSON under /api/, never a traceback. The page renders without a
    request context (the failure may be the database the context would read). A database outage
    (raised anywhere: a view, the session or authentication middleware) is a 503 instead."""
    if database_unavailable(sys.exc_info()[1]):
        return service_unavailable(request)
    if _is_api(request):
        return JsonResponse({"errors": ["internal error; the server log has details"]}, status=500)
    body = loader.get_template("500.html").render({"debug_exception": debug_exception})
    return HttpResponse(body, status=500)


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
