"""The dashboard's page decorator: login required, and `request.tenancy` (ctxeng.accounts.selectors.
Tenancy: the user's tenants with their roles, and the one the session acts in, SESSION_TENANT)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse

from .selectors import memberships_of

SESSION_TENANT = "ctxeng_tenant"
LOGIN_URL = "/login/"


def dashboard_page(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Login required; attaches `request.tenancy` (the user's tenants and the current one)."""

    @login_required(login_url=LOGIN_URL)
    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        request.tenancy = memberships_of(request.user, preferred_slug=request.session.get(SESSION_TENANT))
        return view(request, *args, **kwargs)

    return wrapped
