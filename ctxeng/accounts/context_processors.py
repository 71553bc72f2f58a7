"""Template context for every page: whether the user administers the tenant the page acts in
(the People link). Reads `request.tenancy`, which dashboard pages set; no query of its own."""

from __future__ import annotations

from django.http import HttpRequest

from .models import Role


def people_link(request: HttpRequest) -> dict[str, bool]:
    tenancy = getattr(request, "tenancy", None)
    current = getattr(tenancy, "current", None)
    return {"tenancy_admin": bool(current is not None and tenancy.has_role(current, Role.ADMIN))}
