"""Large request bodies held to a few at a time, per tenant and overall, before they are parsed.

A sync gunicorn worker serves one request at a time, and a large body holds it for its whole
parse and store: six parallel 4 MB submits from one agent token held the four workers of the
README's layout and `/healthz` waited 23.9 s (issue 51, N4). So a request whose Content-Length
passes CTXENG_LARGE_BODY_BYTES holds a slot (ctxeng.server.rate_limits, in the `throttle` cache:
Redis with REDIS_URL, so every web process counts together; else this process) from before its
body is read until its response is made:

- CTXENG_LARGE_REQUESTS_MAX_PER_TENANT (1) per tenant. The tenant is known before the body is
  read only through the token: a token request counts in every tenant its user is a member of
  (one slot in each, all or none: an agent's token belongs to one tenant, and a user of several is
  bounded in each of them). A request without a valid token (the dashboard's forms, anyone
  unauthenticated) counts per client address (CTXENG_PROXY_HOPS, as the login throttle reads it).
- CTXENG_LARGE_REQUESTS_MAX_TOTAL (2) over everyone: the other workers stay free for small
  requests, `/healthz` and the other tenants, whatever the large ones do.

Beyond its tenant's bound a request is answered 429, beyond the total 503, both with
`Retry-After: 2` and the error naming the setting (JSON under /api/, the error page elsewhere); it
was not read, so it was not applied, and the Python client retries it with the same Idempotency-Key.
A slot is a lease of CTXENG_LARGE_REQUEST_LEASE_SECONDS that a thread renews while the request
runs and gives back in `finally`: a worker killed mid-request (no `finally`) leaves a slot that
expires within the lease. A cache that cannot be reached lets the request through (logged), as
every throttle here does. CTXENG_LARGE_BODY_BYTES=0 turns the bound off.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse

from ctxeng.server.login_throttle import client_address
from ctxeng.server.middleware import problem_response
from ctxeng.server.rate_limits import slots_release, slots_renew, slots_try

logger = logging.getLogger(__name__)

# When a refused request may try again: a large body's parse and store takes a second or two.
RETRY_AFTER_SECONDS = 2
TOTAL_KEY = "large:total"


def declared_length(request: HttpRequest) -> int:
    try:
        return max(int(request.META.get("CONTENT_LENGTH") or 0), 0)
    except ValueError:
        return 0


def _token_user_id(request: HttpRequest) -> int | None:
    """The user of the request's `Authorization: Token <key>`, if the key is a token (DRF reads
    the header the same way; an unknown key is answered 401 later)."""
    words = request.META.get("HTTP_AUTHORIZATION", "").split()
    if len(words) != 2 or words[0].lower() != "token":
        return None
    from rest_framework.authtoken.models import Token  # not at import: middleware loads before DRF

    return Token.objects.filter(key=words[1]).values_list("user_id", flat=True).first()


def counters_for(request: HttpRequest) -> list[tuple[str, int]]:
    """The counters a large request holds a slot in: its tenants' (or its address's), then the
    total; in that order, so a request refused by both is told of its own bound (429)."""
    from ctxeng.accounts.models import Membership

    per_tenant = settings.CTXENG_LARGE_REQUESTS_MAX_PER_TENANT
    total = [(TOTAL_KEY, settings.CTXENG_LARGE_REQUESTS_MAX_TOTAL)]
    try:
        user_id = _token_user_id(request)
        tenants = (sorted(set(Membership.objects.filter(user_id=user_id).values_list("tenant_id", flat=True)))
                   if user_id is not None else [])
    except DatabaseError:  # the view answers the outage (503); the request counts by address meanwhile
        tenants = []
    if tenants:
        return [(f"large:tenant:{tenant_id}", per_tenant) for tenant_id in tenants] + total
    return [(f"large:address:{client_address(request)}", per_tenant)] + total


class _Lease:
    """Renews a holder's slots every third of the lease until stopped."""

    def __init__(self, counters: list[tuple[str, int]], holder: str, seconds: float) -> None:
        self.counters, self.holder, self.seconds = counters, holder, seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="ctxeng-large-request-lease", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            slots_renew(self.counters, self.holder, self.seconds)

    def end(self) -> None:
        self._stop.set()
        self._thread.join()
        slots_release(self.counters, self.holder)


def refusal(request: HttpRequest, counters: list[tuple[str, int]], full: int) -> HttpResponse:
    """429 (the request's tenant or address is at its bound) or 503 (the service is), with Retry-After."""
    key, limit = counters[full]
    if key == TOTAL_KEY:
        status, holding, setting = 503, "the service is reading", "CTXENG_LARGE_REQUESTS_MAX_TOTAL"
    else:
        whose = "your tenant" if key.startswith("large:tenant:") else "your address"
        status, holding, setting = 429, f"{whose} is sending", "CTXENG_LARGE_REQUESTS_MAX_PER_TENANT"
    problem = (f"body: {declared_length(request)} bytes is a large request (over CTXENG_LARGE_BODY_BYTES, "
               f"{settings.CTXENG_LARGE_BODY_BYTES}) and {holding} {limit} already "
               f"({setting}); retry in {RETRY_AFTER_SECONDS} s (the request was not applied)")
    response = problem_response(request, problem, status)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class LargeRequestMiddleware:
    """Holds a slot for each request with a large body, or refuses it unread (module docstring)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        threshold = settings.CTXENG_LARGE_BODY_BYTES
        if not threshold or declared_length(request) <= threshold:
            return self.get_response(request)
        counters = counters_for(request)
        seconds = settings.CTXENG_LARGE_REQUEST_LEASE_SECONDS
        holder, full = slots_try(counters, seconds)
        if holder is None and full is not None:
            return refusal(request, counters, full)
        if holder is None:  # the counter cannot be reached: let it through (module docstring)
            return self.get_response(request)
        lease = _Lease(counters, holder, seconds)
        try:
            return self.get_response(request)
        finally:
            lease.end()
