"""Template context for every page: whether the user administers the tenant the page acts in
(the People link; reads `request.tenancy`, which dashboard pages set; no query of its own), the
`?tenant=` its links to runs and policies carry (ctxeng.accounts.pages.tenant_query), and how the
user wants timestamps shown (from the session: ctxeng.accounts.time_display)."""

from __future__ import annotations

from django.http import HttpRequest

from .models import Role
from .pages import tenant_query
from .time_display import time_display_for


def people_link(request: HttpRequest) -> dict[str, bool]:
    tenancy = getattr(request, "tenancy", None)
    current = getattr(tenancy, "current", None)
    return {"tenancy_admin": bool(current is not None and tenancy.has_role(current, Role.ADMIN))}


def time_display(request: HttpRequest) -> dict[str, str]:
    return {"time_display": time_display_for(request)}


def tenant_link(request: HttpRequest) -> dict[str, str]:
    query = tenant_query(request)
    # `tenant_and`: the same parameter after a link's own query (`?from=3&to=4&tenant=...`).
    return {"tenant_query": query, "tenant_and": f"&{query[1:]}" if query else ""}
