"""Login throttling: attempts are counted before any password is hashed, and a locked pair is
refused by django-axes.

Two layers, in this order:

1. `LoginRateMiddleware` (after CSRF, before the view): a POST to a login page (the dashboard's
   `/login/`, the admin's) is counted in the shared `throttle` cache
   (ctxeng.server.rate_limits.windows_take: Redis across every web process when REDIS_URL is set)
   in these windows, all or none:

   - from an address this username has logged in from before (a *known* address, remembered for
     CTXENG_LOGIN_KNOWN_ADDRESS_DAYS after each success): the address's own window only
     (CTXENG_LOGIN_RATE_PER_ADDRESS);
   - from any other address: the address's window, the username's (CTXENG_LOGIN_RATE_PER_USERNAME,
     over every address) and the overall ceiling (CTXENG_LOGIN_RATE_TOTAL).

   Beyond one, the answer is the 429 page with Retry-After, and no password hasher runs; a refused
   attempt counts in none. Each hash costs a worker a few hundred milliseconds of CPU, so a flood
   of logins with random usernames (which axes' per username-and-address lockout never stops: no
   pair repeats) used to take every worker; now it costs at most the ceiling's worth of hashes.

   What an attacker can do to a user (issue 51, N1): a flood from any set of addresses fills those
   addresses' windows, the usernames it names and at most the ceiling (high: 300/min by default,
   30 times one address's rate, so people logging in at the same moment are not refused). A user
   it does not name is refused only when logging in from a new address while the ceiling is full,
   which takes more than 30 addresses at the defaults; from a known address, never. A user it
   names is slowed from new addresses (the username's window, with Retry-After), never from a
   known one: a known address's attempts count in its own window only, which the attacker cannot
   fill from elsewhere, and axes locks the attacker's username-and-address pairs, not the user's.
2. `LoginThrottleBackend`: django-axes', first in AUTHENTICATION_BACKENDS, refuses a locked-out
   username/address pair before the password is compared. A check without a request has no
   address to count against: Django's test client `login()` and scripts calling `authenticate()`
   directly. Axes raises for those; here they fall through to the model backend unthrottled,
   since no remote client is involved.

Usernames and addresses are keys by their SHA-256 (a cache key of any length or character).

`client_address(request)` is the address both layers count (axes through
AXES_CLIENT_IP_CALLABLE): REMOTE_ADDR, or behind CTXENG_PROXY_HOPS trusted proxies (nginx: 1)
the entry they appended to X-Forwarded-For, never one the client wrote there itself.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.contrib.auth.signals import user_logged_in
from django.core.cache import caches
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from .rate_limits import parse_rate, windows_take

LOGIN_VIEWS = frozenset({"login", "admin:login"})
logger = logging.getLogger(__name__)


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


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _known_key(username: str, address: str) -> str:
    return f"login:known:{_digest(username)}:{_digest(address)}"


def remember_address(sender, request: HttpRequest | None, user, **kwargs) -> None:
    """`user_logged_in`: the address is known for this username from now on (module docstring, 1)."""
    if request is None or not settings.CTXENG_LOGIN_KNOWN_ADDRESS_DAYS:
        return
    try:
        caches["throttle"].set(_known_key(user.get_username(), client_address(request)), 1,
                               timeout=int(settings.CTXENG_LOGIN_KNOWN_ADDRESS_DAYS * 86400))
    except Exception:  # noqa: BLE001 - a throttle outage must not fail a login; it is logged as one
        logger.warning("throttle cache unavailable; known login address not remembered", exc_info=True)


def address_known(username: str, address: str) -> bool:
    """Whether `username` logged in from `address` within CTXENG_LOGIN_KNOWN_ADDRESS_DAYS."""
    if not username or not settings.CTXENG_LOGIN_KNOWN_ADDRESS_DAYS:
        return False
    try:
        return bool(caches["throttle"].get(_known_key(username, address)))
    except Exception:  # noqa: BLE001 - unknown, then: the stricter windows apply
        logger.warning("throttle cache unavailable; login address taken as new", exc_info=True)
        return False


def login_attempt_refused(request: HttpRequest) -> float | None:
    """Count this login attempt; None when it may go on, else the seconds until it may."""
    address = client_address(request)
    username = request.POST.get("username", "")
    rates = [(f"login:address:{_digest(address)}", settings.CTXENG_LOGIN_RATE_PER_ADDRESS)]
    if not address_known(username, address):
        rates += [(f"login:username:{_digest(username)}", settings.CTXENG_LOGIN_RATE_PER_USERNAME),
                  ("login:total", settings.CTXENG_LOGIN_RATE_TOTAL)]
    windows = []
    for key, rate in rates:
        parsed = parse_rate(rate)
        if parsed is not None:
            windows.append((key, *parsed))
    return windows_take(windows)


class LoginRateMiddleware:
    """Refuses a login POST beyond the login rates before its view runs (module docstring, 1)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        user_logged_in.connect(remember_address, dispatch_uid="ctxeng.server.login_throttle.remember_address")

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
