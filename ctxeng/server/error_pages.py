"""The styled error pages in DEBUG too.

With DEBUG on, Django answers an unmatched URL, an Http404, a PermissionDenied and an uncaught
exception with its technical pages, whose inline styles and scripts the CSP blocks (ctxeng/server/csp.py)
and which are not what a user of `make run` should meet. This middleware sends those cases to the
handlers of ctxeng.server.views (JSON under /api/) when DEBUG is on; with DEBUG off it does nothing and
Django calls the same handlers itself (handler404/403/500 in ctxeng/server/urls.py). An uncaught
exception is still logged with its traceback on `django.request`, and the DEBUG 500 page names
its type and message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import Resolver404, get_resolver

from . import views

logger = logging.getLogger("django.request")


class DebugErrorPagesMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if settings.DEBUG:
            try:
                get_resolver(getattr(request, "urlconf", None)).resolve(request.path_info)
            except Resolver404 as exc:
                return views.not_found(request, exc)
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not settings.DEBUG:
            return None
        if isinstance(exception, Http404):
            return views.not_found(request, exception)
        if isinstance(exception, PermissionDenied):
            return views.permission_denied(request, exception)
        logger.error("Internal Server Error: %s", request.path, exc_info=exception)
        if views.database_unavailable(exception):
            return views.service_unavailable(request)
        return views.server_error(request, debug_exception=f"{type(exception).__name__}: {exception}")
