"""AuditEvent: one row per attributable change, append-only.

Policy revisions (created, edited, published, retired), API tokens (issued, revoked), people
(a user created, a role granted or revoked, a password set, a set-password link issued; the
people page, ctxeng.accounts) and login lockouts (too many wrong passwords, django-axes) write one
event each: the actor (a user, or the operator named by `actor_name` for management commands),
the time, the tenant, and the digest that identifies what changed — the revision's policy digest,
or a token's fingerprint (a sha256 prefix of the key; the key itself is never stored). Rows
cannot be changed or deleted through the model.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from ctxeng.server.errors import Immutable


class AuditAction(models.TextChoices):
    REVISION_CREATED = "revision_created"
    REVISION_EDITED = "revision_edited"
    REVISION_PUBLISHED = "revision_published"
    REVISION_RETIRED = "revision_retired"
    TOKEN_ISSUED = "token_issued"
    TOKEN_REVOKED = "token_revoked"
    RUN_CLOSED = "run_closed"
    MEMBERSHIP_REVOKED = "membership_revoked"
    LOGIN_LOCKED_OUT = "login_locked_out"
    USER_CREATED = "user_created"
    MEMBERSHIP_GRANTED = "membership_granted"
    PASSWORD_SET = "password_set"
    PASSWORD_LINK_ISSUED = "password_link_issued"


class AuditEvent(models.Model):
    action = models.CharField(max_length=30, choices=AuditAction.choices)
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.CASCADE, null=True, blank=True,
                               related_name="audit_events")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                              related_name="+")
    actor_name = models.CharField(max_length=200, help_text="the actor's username when acted, or 'cli:<os user>'")
    policy = models.ForeignKey("policies.Policy", on_delete=models.CASCADE, null=True, blank=True,
                               related_name="audit_events")
    revision = models.PositiveIntegerField(null=True, blank=True)
    subject = models.CharField(max_length=200, blank=True, help_text="the token's owner, for token events")
    digest = models.CharField(max_length=80, blank=True)
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["policy", "-created_at"], name="audit_policy_time"),
                   models.Index(fields=["tenant", "-created_at"], name="audit_tenant_time")]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor_name} at {self.created_at:%Y-%m-%d %H:%M}"

    def save(self, *args, **kwargs) -> None:
        if not self._state.adding:
            raise Immutable("audit events are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise Immutable("audit events are append-only")
