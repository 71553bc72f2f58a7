"""The people page: a tenant admin adds people, grants and revokes roles, issues set-password
links and API tokens, and revokes tokens, in the tenant the session acts in.

Views are thin: check the admin role in the current tenant (403 naming it otherwise), resolve the
member (404 for anyone outside the tenant), call a service, and render. A new token or link is
rendered into the response of the POST that made it, never stored or put in a session message:
it is shown once. Service refusals come back as an error message above the list.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse, reverse_lazy
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST

from ctxeng.server.errors import ServiceError

from . import selectors, services, usage
from .models import Role, Tenant
from .pages import dashboard_page
from .time_display import remember


def _admin_tenant(request: HttpRequest) -> Tenant:
    tenant = request.tenancy.current
    if tenant is None or not request.tenancy.has_role(tenant, Role.ADMIN):
        where = f" in tenant {tenant.slug}" if tenant else ""
        raise PermissionDenied(f"the admin role is required{where} to manage its people")
    return tenant


def _member_or_404(tenant: Tenant, user_id: int):
    user = selectors.member_get(tenant, user_id)
    if user is None:
        raise Http404("no such member")
    return user


def _page(request: HttpRequest, tenant: Tenant, *, status: int = 200, **shown: Any) -> HttpResponse:
    return render(request, "accounts/people.html", {
        "tenant": tenant, "people": selectors.people_in(tenant, actor=request.user), "roles": Role.values,
        "events": selectors.people_events(tenant), "link_days": max(1, settings.PASSWORD_RESET_TIMEOUT // 86400),
        "quotas": usage.tenant_usage(tenant),
        # After a refusal the form keeps what was typed, except a password.
        "typed_username": request.POST.get("username", "") if status != 200 else "", **shown,
    }, status=status)


def _back(user_id: int) -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse("people") + f"#person-{user_id}")


@require_http_methods(["GET", "POST"])
@dashboard_page
def people(request: HttpRequest) -> HttpResponse:
    """The tenant's members; POST adds one (with a password, or a set-password link shown once)."""
    tenant = _admin_tenant(request)
    if request.method == "GET":
        return _page(request, tenant)
    with_password = request.POST.get("credential") == "password"
    try:
        # One write: a refused link leaves the person and roles unadded too.
        with transaction.atomic():
            user, created = services.person_add(
                tenant=tenant, username=request.POST.get("username", ""), roles=request.POST.getlist("roles"),
                password=request.POST.get("password", "") if with_password else None, actor=request.user,
            )
            link = None
            if request.POST.get("credential") == "link":
                link = request.build_absolute_uri(services.password_link_issue(tenant=tenant, user=user,
                                                                               actor=request.user))
    except ServiceError as exc:
        return _page(request, tenant, status=exc.status_code, errors=exc.errors)
    verb = "Added" if created else "Updated"
    return _page(request, tenant, done=f"{verb} {user.get_username()} in {tenant.slug}.", link=link, link_for=user,
                 added=user)


@require_POST
@dashboard_page
def person_role(request: HttpRequest, user_id: int) -> HttpResponse:
    tenant = _admin_tenant(request)
    user = _member_or_404(tenant, user_id)
    role, action = request.POST.get("role", ""), request.POST.get("action", "")
    try:
        if action == "grant":
            services.role_grant(tenant=tenant, user=user, role=role, actor=request.user)
            messages.success(request, f"{user.get_username()} now holds {role} in {tenant.slug}.")
        elif action == "revoke":
            services.role_revoke(tenant=tenant, user=user, role=role, actor=request.user)
            messages.success(request, f"{user.get_username()} no longer holds {role} in {tenant.slug}.")
        else:
            return _page(request, tenant, status=400, errors=["action: grant or revoke"])
    except ServiceError as exc:
        return _page(request, tenant, status=exc.status_code, errors=exc.errors)
    return _back(user.pk)


@require_POST
@dashboard_page
def person_token(request: HttpRequest, user_id: int) -> HttpResponse:
    """Issue an API token and show it in this response only."""
    tenant = _admin_tenant(request)
    user = _member_or_404(tenant, user_id)
    try:
        token = services.person_token_issue(tenant=tenant, user=user, actor=request.user)
    except ServiceError as exc:
        return _page(request, tenant, status=exc.status_code, errors=exc.errors)
    return _page(request, tenant, done=f"Issued an API token for {user.get_username()}.", token=token.key,
                 token_for=user)


@require_POST
@dashboard_page
def person_token_revoke(request: HttpRequest, user_id: int) -> HttpResponse:
    tenant = _admin_tenant(request)
    user = _member_or_404(tenant, user_id)
    try:
        services.person_token_revoke(tenant=tenant, user=user, actor=request.user)
    except ServiceError as exc:
        return _page(request, tenant, status=exc.status_code, errors=exc.errors)
    messages.success(request, f"Revoked the API token of {user.get_username()}; it gets 401 from now on.")
    return _back(user.pk)


@require_POST
@dashboard_page
def person_password_link(request: HttpRequest, user_id: int) -> HttpResponse:
    tenant = _admin_tenant(request)
    user = _member_or_404(tenant, user_id)
    try:
        path = services.password_link_issue(tenant=tenant, user=user, actor=request.user)
    except ServiceError as exc:
        return _page(request, tenant, status=exc.status_code, errors=exc.errors)
    return _page(request, tenant, done=f"A set-password link for {user.get_username()}.",
                 link=request.build_absolute_uri(path), link_for=user)


class SetPasswordView(auth_views.PasswordResetConfirmView):
    """The page a set-password link opens (no login): Django's reset-confirm view, our template."""

    template_name = "accounts/set_password.html"
    success_url = reverse_lazy("login")
    post_reset_login = False

    def form_valid(self, form):
        response = super().form_valid(form)
        messages.success(self.request, "Your password is set; log in with it.")
        return response


@require_POST
@dashboard_page
def time_display_set(request: HttpRequest) -> HttpResponse:
    """The user's choice of how timestamps show (UTC or the browser's zone); back to the page it came from."""
    try:
        profile = services.profile_time_display_set(user=request.user, time_display=request.POST.get("time_display", ""))
        remember(request, profile.time_display)
    except ServiceError as exc:
        messages.error(request, str(exc))
    target = request.POST.get("next") or "/"
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = "/"
    return HttpResponseRedirect(target)
