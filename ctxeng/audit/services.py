"""Writing audit events (append-only). Callers are the services that make the change, inside
their transaction, so an event exists exactly when its change was committed."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from .models import AuditAction, AuditEvent


def cli_actor() -> str:
    """The operator running a management command, as `cli:<os user>`."""
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # noqa: BLE001 - no login name in some containers
        return "cli"


def actor_label(user: AbstractBaseUser | None, actor_name: str = "") -> str:
    if actor_name:
        return actor_name
    if user is not None and getattr(user, "is_authenticated", False):
        return user.get_username()
    return "system"


def audit_record(
    *,
    action: AuditAction,
    user: AbstractBaseUser | None,
    actor_name: str = "",
    tenant=None,
    policy=None,
    revision: int | None = None,
    subject: str = "",
    digest: str = "",
    note: str = "",
) -> AuditEvent:
    actor = user if user is not None and getattr(user, "is_authenticated", False) else None
    return AuditEvent.objects.create(
        action=action, tenant=tenant, actor=actor, actor_name=actor_label(user, actor_name)[:200],
        policy=policy, revision=revision, subject=subject[:200], digest=digest, note=note,
    )


def revision_event(*, action: AuditAction, revision, user: AbstractBaseUser | None, note: str = "") -> AuditEvent:
    """An event for a policy revision: its policy, tenant, number and digest."""
    return audit_record(action=action, user=user, tenant=revision.policy.tenant, policy=revision.policy,
                        revision=revision.revision, digest=revision.digest, note=note)


def login_lockout_event(*, username: str, ip_address: str | None, cool_off: timedelta) -> AuditEvent | None:
    """One event per lockout of a username/address pair (django-axes' `user_locked_out`).

    Axes signals again for every attempt refused while the pair is locked; those add nothing new,
    so an event is written only when none exists for the pair within the cool-off period.
    """
    address = ip_address or "unknown"
    note = f"too many failed logins from {address}"
    recent = AuditEvent.objects.filter(
        action=AuditAction.LOGIN_LOCKED_OUT, subject=username[:200], note=note,
        created_at__gte=timezone.now() - cool_off,
    )
    if recent.exists():
        return None
    return audit_record(action=AuditAction.LOGIN_LOCKED_OUT, user=None, actor_name=f"ip:{address}",
                        subject=username, note=note)
