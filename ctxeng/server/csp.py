"""Content-Security-Policy on every HTML response.

The dashboard loads its one script (htmx) and its stylesheet as static files and carries no
inline script, event-handler attribute or inline style, so the policy (settings.CTXENG_CSP,
`script-src 'self'` by default) forbids all of those: an injected `<script>` or `onerror=` in
rendered candidate content does not run even if escaping were ever missed. JSON responses do not
execute and get no header. An empty CTXENG_CSP turns the header off.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        policy = settings.CTXENG_CSP
        content_type = response.get("Content-Type", "")
        if policy and content_type.startswith("text/html") and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = policy
        return response


def with_inline_styles(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The site policy plus `'unsafe-inline'` for styles only (third-party pages such as Swagger UI
    ship a `<style>` block); scripts stay `'self'`."""

    def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        response = view(request, *args, **kwargs)
        policy = settings.CTXENG_CSP
        if policy and "style-src 'self'" in policy:
            response["Content-Security-Policy"] = policy.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")
        return response

    return wrapped
