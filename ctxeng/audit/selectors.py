"""Reading the audit trail."""

from __future__ import annotations

from django.db.models import Q, QuerySet

from .models import AuditAction, AuditEvent

TOKEN_ACTIONS = (AuditAction.TOKEN_ISSUED, AuditAction.TOKEN_REVOKED)


def audit_events_for_policy(policy, *, limit: int = 50) -> list[AuditEvent]:
    """The policy's revision events and the token events of its tenant, newest first."""
    events: QuerySet[AuditEvent] = AuditEvent.objects.filter(
        Q(policy=policy) | Q(tenant_id=policy.tenant_id, action__in=TOKEN_ACTIONS)
    ).select_related("actor")
    return list(events.order_by("-created_at", "-id")[:limit])
