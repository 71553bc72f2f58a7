"""Writes for tenancy: members and their roles, passwords, API tokens. Each write records its
audit event (ctxeng.audit.services) in the same transaction.

`tenant_member_add` and `token_revoke` serve the management commands (issue_token, revoke_token,
load_example); the `person_*`, `role_*` and `token_*` writes with an `actor` serve the people page,
where a tenant admin acts inside their tenant only: a password or a token belongs to the user in
every tenant, so those are refused (Forbidden) for a user who is also a member of a tenant the
actor does not administer (selectors.account_managed_by). The last admin of a tenant cannot lose
the role, so a tenant always has someone who can manage it.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.auth.tokens import default_token_generator
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from rest_framework.authtoken.models import Token

from ctxeng.audit.models import AuditAction
from ctxeng.audit.services import audit_record
from ctxeng.server.errors import BadReference, Conflict, Forbidden, NotFound, ServiceError

from .models import Membership, Profile, Role, Tenant, TimeDisplay
from .selectors import account_managed_by, tenants_for, token_fingerprint

# --------------------------------------------------------------------------- management commands


def tenant_member_add(
    *, username: str, tenant_slug: str, roles: list[str], password: str | None = None, actor_name: str = ""
) -> Token:
    """Create the user, tenant and memberships as needed; return the user's API token (issued if new)."""
    unknown = sorted(set(roles) - set(Role.values))
    if unknown:
        raise ValueError(f"unknown role(s) {', '.join(unknown)}; expected {', '.join(Role.values)}")
    with transaction.atomic():
        user, created = get_user_model().objects.get_or_create(username=username)
        if password is not None:
            user.set_password(password)
            user.save()
        elif created:
            user.set_unusable_password()
            user.save()
        tenant, _ = Tenant.objects.get_or_create(slug=tenant_slug, defaults={"name": tenant_slug})
        for role in roles:
            Membership.objects.get_or_create(user=user, tenant=tenant, role=role)
        token, _ = token_issue(user=user, actor=None, actor_name=actor_name)
    return token


def tenant_member_remove(
    *, tenant: Tenant, user: AbstractBaseUser, actor: AbstractBaseUser | None, role: str | None = None
) -> int:
    """Revoke a user's membership (one role, or all). What the user wrote stops re-entering context:
    later assemblies see a permission_revoked event for their artifacts. Returns rows removed."""
    rows = Membership.objects.filter(tenant=tenant, user=user)
    if role is not None:
        rows = rows.filter(role=role)
    with transaction.atomic():
        removed, _ = rows.delete()
        if removed:
            audit_record(action=AuditAction.MEMBERSHIP_REVOKED, user=actor, tenant=tenant,
                         subject=user.get_username(), note=f"role {role}" if role else "all roles")
    return removed


def _token_event(*, action: str, owner: AbstractBaseUser, key: str, actor: AbstractBaseUser | None, actor_name: str) -> None:
    for tenant in list(tenants_for(owner)) or [None]:
        audit_record(action=action, user=actor, actor_name=actor_name, tenant=tenant,
                     subject=owner.get_username(), digest=token_fingerprint(key))


def token_issue(
    *, user: AbstractBaseUser, actor: AbstractBaseUser | None, actor_name: str = ""
) -> tuple[Token, bool]:
    """The user's API token, created (and audited, per tenant of the user) if they had none."""
    with transaction.atomic():
        token, created = Token.objects.get_or_create(user=user)
        if created:
            _token_event(action=AuditAction.TOKEN_ISSUED, owner=user, key=token.key, actor=actor, actor_name=actor_name)
    return token, created


def token_revoke(
    *, username: str | None = None, key: str | None = None, actor: AbstractBaseUser | None, actor_name: str = ""
) -> Token:
    """Delete a token, named by its owner's username or by the key; it gets 401 from then on.

    Audited per tenant of the owner. Unknown user, no token, or an unknown key: NotFound.
    """
    if (username is None) == (key is None):
        raise ValueError("name either the username or the key")
    with transaction.atomic():
        tokens = Token.objects.select_for_update().select_related("user")
        token = tokens.filter(user__username=username).first() if username is not None else tokens.filter(key=key).first()
        if token is None:
            raise NotFound(f"user {username!r} has no token" if username is not None else "token: no such key")
        _token_event(action=AuditAction.TOKEN_REVOKED, owner=token.user, key=token.key, actor=actor, actor_name=actor_name)
        token.delete()
    return token


# --------------------------------------------------------------------------- the people page


def _require_managed(actor: AbstractBaseUser, user: AbstractBaseUser, what: str) -> None:
    if not account_managed_by(actor, user):
        raise Forbidden(f"{user.get_username()} is also a member of a tenant you do not administer (or is staff); "
                        f"their {what} is managed there or with manage.py")


def _check_roles(roles: list[str]) -> None:
    unknown = sorted(set(roles) - set(Role.values))
    if unknown:
        raise BadReference(f"roles: unknown role(s) {', '.join(unknown)}; expected {', '.join(Role.values)}")
    if not roles:
        raise BadReference("roles: choose at least one role")


def person_add(
    *, tenant: Tenant, username: str, roles: list[str], password: str | None, actor: AbstractBaseUser
) -> tuple[AbstractBaseUser, bool]:
    """Add a member to `tenant` with `roles`, creating the user if new (with `password`, or none
    usable until they follow a set-password link). Returns (user, created).

    An existing user gains the roles only if they are a member of `tenant` already, or every
    tenant they belong to is one the actor administers (account_managed_by): an admin cannot take
    another tenant's person. Anyone else (another tenant's member, staff, an account in no tenant)
    is refused in the same words as any unavailable username, before anything is written, so the
    refusal does not tell which. Setting an existing user's password needs account_managed_by.
    """
    _check_roles(roles)
    users = get_user_model()
    username = username.strip()
    try:
        users._meta.get_field(users.USERNAME_FIELD).run_validators(username)
    except ValidationError as exc:
        raise BadReference(*(f"username: {m}" for m in exc.messages)) from None
    if not username:
        raise BadReference("username: required")
    with transaction.atomic():
        user = users.objects.select_for_update().filter(**{users.USERNAME_FIELD: username}).first()
        created = user is None
        if created:
            user = users(**{users.USERNAME_FIELD: username})
        elif not (Membership.objects.filter(user=user, tenant=tenant).exists() or account_managed_by(actor, user)):
            raise Conflict(f"username: {username!r} is not available; choose another username")
        if password is not None:
            if not created:
                _require_managed(actor, user, "password")
            try:
                password_validation.validate_password(password, user)
            except ValidationError as exc:
                raise BadReference(*(f"password: {m}" for m in exc.messages)) from None
            user.set_password(password)
        elif created:
            user.set_unusable_password()
        user.save()
        if created:
            audit_record(action=AuditAction.USER_CREATED, user=actor, tenant=tenant, subject=username,
                         note="with a password" if password is not None else "no password yet")
        elif password is not None:
            audit_record(action=AuditAction.PASSWORD_SET, user=actor, tenant=tenant, subject=username)
        for role in roles:
            role_grant(tenant=tenant, user=user, role=role, actor=actor)
    return user, created


def role_grant(*, tenant: Tenant, user: AbstractBaseUser, role: str, actor: AbstractBaseUser) -> bool:
    """Give `user` `role` in `tenant`; audited when it is new. Returns whether it was new."""
    _check_roles([role])
    with transaction.atomic():
        _, created = Membership.objects.get_or_create(user=user, tenant=tenant, role=role)
        if created:
            audit_record(action=AuditAction.MEMBERSHIP_GRANTED, user=actor, tenant=tenant,
                         subject=user.get_username(), note=f"role {role}")
    return created


def role_revoke(*, tenant: Tenant, user: AbstractBaseUser, role: str, actor: AbstractBaseUser) -> int:
    """Take `role` in `tenant` from `user` (tenant_member_remove); never the tenant's last admin."""
    _check_roles([role])
    with transaction.atomic():
        if role == Role.ADMIN:
            admins = Membership.objects.select_for_update().filter(tenant=tenant, role=Role.ADMIN)
            if not admins.exclude(user=user).exists():
                raise Conflict(f"role: {user.get_username()} is the last admin of {tenant.slug}; grant admin to "
                               "someone else first")
        return tenant_member_remove(tenant=tenant, user=user, actor=actor, role=role)


def password_link_issue(*, tenant: Tenant, user: AbstractBaseUser, actor: AbstractBaseUser) -> str:
    """The path of a one-time set-password page for `user` (Django's password-reset token: it stops
    working once the password changes, or after PASSWORD_RESET_TIMEOUT). Audited; the link itself
    is shown once and never stored."""
    _require_managed(actor, user, "password")
    from django.urls import reverse

    uid = urlsafe_base64_encode(force_bytes(user.pk))
    path = reverse("set-password", args=[uid, default_token_generator.make_token(user)])
    audit_record(action=AuditAction.PASSWORD_LINK_ISSUED, user=actor, tenant=tenant, subject=user.get_username())
    return path


def person_token_issue(*, tenant: Tenant, user: AbstractBaseUser, actor: AbstractBaseUser) -> Token:
    """A new API token for a member, to be shown once. A user holding one must have it revoked first
    (the key is never shown again after it was issued)."""
    _require_managed(actor, user, "API token")
    if Token.objects.filter(user=user).exists():
        raise Conflict(f"token: {user.get_username()} already has a token; revoke it first")
    token, _ = token_issue(user=user, actor=actor)
    return token


def person_token_revoke(*, tenant: Tenant, user: AbstractBaseUser, actor: AbstractBaseUser) -> Token:
    _require_managed(actor, user, "API token")
    return token_revoke(username=user.get_username(), actor=actor)


# --------------------------------------------------------------------------- the user's own settings


def profile_time_display_set(*, user: AbstractBaseUser, time_display: str) -> Profile:
    """Show this user's timestamps in UTC or in their browser's zone (a setting of their own)."""
    if time_display not in TimeDisplay.values:
        raise ServiceError(f"time_display: expected one of {', '.join(TimeDisplay.values)}, got {time_display[:40]!r}")
    profile, _ = Profile.objects.update_or_create(user=user, defaults={"time_display": time_display})
    return profile
