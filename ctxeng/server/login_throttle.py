"""Login throttling: attempts are counted before any password is hashed, and a locked pair is
refused by django-axes.

Two layers, in this order:

1. `LoginRateMiddleware` (after CSRF, before the view): a POST to a login page (the dashboard's
   `/login/`, the admin's) is counted per client address (CTXENG_LOGIN_RATE_PER_ADDRESS) and over
   every address (CTXENG_LOGIN_RATE_TOTAL), in the shared `throttle` cache
   (ctxeng.server.rate_limits.windows_take: Redis across every web process when REDIS_URL is set). Beyond
   either, the answer is the 429 page with Retry-After, and no password hasher runs; a refused
   attempt counts in neither. Each hash
   costs a worker a few hundred milliseconds of CPU, so a flood of logins with random usernames
   (which axes' per username-and-address lockout never stops: no pair repeats) used to take
   every worker; now it costs at most the total rate's worth of hashes. With its own rate, one
   address cannot use up the total for everyone.
2. `LoginThrottleBackend`: django-axes', first in AUTHENTICATION_BACKENDS, refuses a locked-out
   username/address pair before the password is compared. A check without a request has no
   address to count against: Django's test client `login()` and scripts calling `authenticate()`
   directly. Axes raises for those; here they fall through to the model backend unthrottled,
   since no remote client is involved.

`client_address(request)` is the address both layers count (axes through
AXES_CLIENT_IP_CALLABLE): REMOTE_ADDR, or behind CTXENG_PROXY_HOPS trusted proxies (nginx: 1)
the entry they appended to X-Forwarded-For, never one the client wrote there itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from .rate_limits import parse_rate, windows_take

LOGIN_VIEWS = frozenset({"login", "admin:login"})


class LoginThrottleBackend(AxesStandaloneBackend):
    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


def client_address(request: HttpRequest) -> str:
    """The client's address (see the module docstring)."""
    hops = settings.CTXENG_PROXY_HOPS
    if hops:
        forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
        if len(forwarded) >= hops:
            return forwarded[-hops]
    return request.META.get("REMOTE_ADDR", "")


def login_attempt_refused(request: HttpRequest) -> float | None:
    """Count this login attempt; None when it may go on, else the seconds until it may."""
    windows = []
    for key, rate in ((f"login:address:{client_address(request)}", settings.CTXENG_LOGIN_RATE_PER_ADDRESS),
                      ("login:total", settings.CTXENG_LOGIN_RATE_TOTAL)):
        parsed = parse_rate(rate)
        if parsed is not None:
            windows.append((key, *parsed))
    return windows_take(windows)


class LoginRateMiddleware:
    """Refuses a login POST beyond the login rates before its view runs (module docstring, 1)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view_func, view_args, view_kwargs) -> HttpResponse | None:
        match = request.resolver_match
        if request.method != "POST" or match is None or match.view_name not in LOGIN_VIEWS:
            return None
        wait = login_attempt_refused(request)
        if wait is None:
            return None
        seconds = max(1, math.ceil(wait))
        response = TemplateResponse(request, "ctxeng/login_throttled.html", {"retry_after": seconds}, status=429)
        response["Retry-After"] = str(seconds)
        return response
