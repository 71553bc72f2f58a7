"""The dashboard's page decorator: login required, and `request.tenancy` (ctxeng.accounts.selectors.
Tenancy: the user's tenants with their roles, and the one the page acts in).

A page acts in the session's tenant (SESSION_TENANT, set by the switcher), unless its URL names
one with `?tenant=<slug>` (one of the user's tenants; any other is a 404, as an unknown tenant
is), and a page about an object acts in that object's tenant (`act_in`, called by the view once
it found the object among all the user's tenants). The header then names the tenant the page
shows, and its links to pages found by name in a tenant (a run id, a policy id: the same name can
exist in two tenants) carry `?tenant=` (`tenant_query`, in every template's context), so they
open the object of this tenant, not the session's namesake. The session's tenant is unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse

from .selectors import memberships_of

SESSION_TENANT = "ctxeng_tenant"
TENANT_PARAM = "tenant"
LOGIN_URL = "/login/"


def dashboard_page(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Login required; attaches `request.tenancy` (the user's tenants and the one the page acts in)."""

    @login_required(login_url=LOGIN_URL)
    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        request.tenancy = memberships_of(request.user, preferred_slug=request.session.get(SESSION_TENANT))
        named = request.GET.get(TENANT_PARAM)
        if named is not None:
            tenant = next((t for t in request.tenancy.tenants if t.slug == named), None)
            if tenant is None:
                raise Http404("no such tenant")
            act_in(request, tenant.id)
        return view(request, *args, **kwargs)

    return wrapped


def act_in(request: HttpRequest, tenant_id: int) -> None:
    """The page acts in the tenant `tenant_id` (the object the page is about belongs to it, so it
    is one of the user's; taken from `request.tenancy`, no query)."""
    if request.tenancy.current is not None and request.tenancy.current.id == tenant_id:
        return
    tenant = next(t for t in request.tenancy.tenants if t.id == tenant_id)
    request.tenancy = dataclasses.replace(request.tenancy, current=tenant)


def tenant_query(request: HttpRequest) -> str:
    """`?tenant=<slug>` of the tenant the page acts in, for a link to a page found by name; empty
    for a user of one tenant (nothing to tell apart)."""
    tenancy = getattr(request, "tenancy", None)
    if tenancy is None or tenancy.current is None or len(tenancy.tenants) < 2:
        return ""
    return f"?{TENANT_PARAM}={quote(tenancy.current.slug, safe='')}"


def without_tenant_param(url: str) -> str:
    """`url` without its `?tenant=` (the tenant switcher's way back: the page, in the new tenant)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != TENANT_PARAM]
    return urlunsplit(parts._replace(query=urlencode(query)))
