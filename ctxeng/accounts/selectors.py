"""Reads for tenancy: a user's tenants and roles, the tenant a write acts in, what a dashboard page
knows of its user (`memberships_of`, as `request.tenancy`), and the people page.

Every selector that returns tenant data filters by the acting user's tenants, so another tenant's
object is simply not found (404), never "forbidden" (which would confirm it exists).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet
from rest_framework.authtoken.models import Token

from ctxeng.audit.models import AuditAction, AuditEvent
from ctxeng.engine.hashing import sha256_text
from ctxeng.server.errors import Forbidden

from .models import Membership, Profile, Role, Tenant, TimeDisplay

PEOPLE_ACTIONS = (
    AuditAction.USER_CREATED, AuditAction.MEMBERSHIP_GRANTED, AuditAction.MEMBERSHIP_REVOKED,
    AuditAction.PASSWORD_SET, AuditAction.PASSWORD_LINK_ISSUED, AuditAction.TOKEN_ISSUED, AuditAction.TOKEN_REVOKED,
)


def tenants_for(user: AbstractBaseUser) -> QuerySet[Tenant]:
    if not user.is_authenticated:
        return Tenant.objects.none()
    return Tenant.objects.filter(memberships__user=user).distinct()


def roles_in(user: AbstractBaseUser, tenant: Tenant) -> set[str]:
    roles = set(Membership.objects.filter(user=user, tenant=tenant).values_list("role", flat=True))
    if Role.ADMIN in roles:
        roles |= set(Role.values)
    return roles


def tenant_for_role(user: AbstractBaseUser, *, role: str, slug: str | None = None) -> Tenant:
    """The tenant a write acts in: the named one, or the user's only tenant holding `role`.

    A tenant outside the user's memberships, or one where the user lacks the role: Forbidden.
    """
    if slug is not None:
        tenant = tenants_for(user).filter(slug=slug).first()
        if tenant is None:
            raise Forbidden(f"tenant: you are not a member of tenant {slug!r}")
        if role not in roles_in(user, tenant):
            raise Forbidden(f"tenant: the {role} role is required in tenant {slug!r}")
        return tenant
    candidates = [t for t in tenants_for(user) if role in roles_in(user, t)]
    if not candidates:
        raise Forbidden(f"the {role} role is required")
    if len(candidates) > 1:
        raise Forbidden(f"tenant: you hold {role} in several tenants; name one with tenant")
    return candidates[0]


@dataclass(frozen=True)
class Tenancy:
    """The user's tenants with roles, and the one the session currently acts in."""

    tenants: list[Tenant]
    roles: dict[int, frozenset[str]]
    current: Tenant | None

    @property
    def tenant_ids(self) -> list[int]:
        return [tenant.id for tenant in self.tenants]

    def has_role(self, tenant: Tenant, role: str) -> bool:
        return role in self.roles.get(tenant.id, frozenset())

    @property
    def current_roles(self) -> frozenset[str]:
        return self.roles.get(self.current.id, frozenset()) if self.current else frozenset()


def memberships_of(user: AbstractBaseUser, *, preferred_slug: str | None) -> Tenancy:
    """One query: the user's memberships; admin implies every role."""
    tenants: dict[int, Tenant] = {}
    roles: dict[int, set[str]] = {}
    for membership in Membership.objects.filter(user=user).select_related("tenant").order_by("tenant__slug"):
        tenants[membership.tenant_id] = membership.tenant
        roles.setdefault(membership.tenant_id, set()).add(membership.role)
    for granted in roles.values():
        if Role.ADMIN in granted:
            granted |= set(Role.values)
    ordered = list(tenants.values())
    current = next((t for t in ordered if t.slug == preferred_slug), ordered[0] if ordered else None)
    return Tenancy(tenants=ordered, roles={k: frozenset(v) for k, v in roles.items()}, current=current)


def token_fingerprint(key: str) -> str:
    """What the audit trail and the people page show of a token: a sha256 prefix, never the key."""
    return "sha256:" + sha256_text(key).removeprefix("sha256:")[:16]


def account_managed_by(actor: AbstractBaseUser, user: AbstractBaseUser) -> bool:
    """May `actor` set `user`'s password or issue and revoke their token?

    A password and a token are the user's everywhere, not per tenant: only when every tenant the
    user belongs to is one the actor administers (and there is at least one: a user in no tenant
    is nobody's to take over), and never for staff or superusers (they are managed with `manage.py`).
    """
    if user.is_staff or user.is_superuser:
        return False
    theirs = set(Membership.objects.filter(user=user).values_list("tenant_id", flat=True))
    administered = set(Membership.objects.filter(user=actor, role=Role.ADMIN).values_list("tenant_id", flat=True))
    return bool(theirs) and theirs <= administered


@dataclass(frozen=True)
class Person:
    user: AbstractBaseUser
    roles: tuple[str, ...]
    grantable: tuple[str, ...]  # the roles they do not hold yet
    token_fingerprint: str
    token_created: object
    other_tenants: int
    managed: bool
    has_password: bool


def people_in(tenant: Tenant, *, actor: AbstractBaseUser) -> list[Person]:
    """The tenant's members with their roles here, their token (fingerprint only) and whether the
    actor may manage their password and token. A fixed number of queries whatever the head count."""
    memberships = Membership.objects.filter(tenant=tenant).select_related("user").order_by("user__username", "role")
    users: dict[int, AbstractBaseUser] = {}
    roles: dict[int, list[str]] = {}
    for membership in memberships:
        users[membership.user_id] = membership.user
        roles.setdefault(membership.user_id, []).append(membership.role)
    tokens = {t.user_id: t for t in Token.objects.filter(user_id__in=users)}
    elsewhere: dict[int, set[int]] = {}
    for user_id, tenant_id in Membership.objects.filter(user_id__in=users).exclude(tenant=tenant).values_list(
            "user_id", "tenant_id"):
        elsewhere.setdefault(user_id, set()).add(tenant_id)
    administered = set(Membership.objects.filter(user=actor, role=Role.ADMIN).values_list("tenant_id", flat=True))
    people = []
    for user_id, user in users.items():
        token = tokens.get(user_id)
        people.append(Person(
            user=user, roles=tuple(roles[user_id]), grantable=tuple(r for r in Role.values if r not in roles[user_id]),
            token_fingerprint=token_fingerprint(token.key) if token else "",
            token_created=token.created if token else None,
            other_tenants=len(elsewhere.get(user_id, ())),
            managed=not (user.is_staff or user.is_superuser) and elsewhere.get(user_id, set()) <= administered,
            has_password=user.has_usable_password(),
        ))
    return people


def member_get(tenant: Tenant, user_id: int) -> AbstractBaseUser | None:
    """A member of `tenant` by id; anyone else (another tenant's user) is not found."""
    return get_user_model().objects.filter(pk=user_id, memberships__tenant=tenant).distinct().first()


def people_events(tenant: Tenant, *, limit: int = 50) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(tenant=tenant, action__in=PEOPLE_ACTIONS)
                .select_related("actor").order_by("-created_at", "-id")[:limit])


def time_display_of(user: AbstractBaseUser) -> str:
    """How this user's pages show timestamps (TimeDisplay); UTC until they pick otherwise."""
    if not user.is_authenticated:
        return TimeDisplay.UTC
    chosen = Profile.objects.filter(user=user).values_list("time_display", flat=True).first()
    return chosen or TimeDisplay.UTC
