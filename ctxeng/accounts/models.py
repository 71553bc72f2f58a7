"""Tenant and Membership: a user acts in a tenant under one or more roles (one row per role).

Admin implies every role (ctxeng.accounts.selectors.roles_in) and lets its holder manage the
tenant's people from the dashboard. API tokens are DRF's `authtoken.Token`, one per user; their
writes are ctxeng.accounts.services.

These models were defined in the manifests app until issue 11. Their tables keep the names they
had there (`db_table`), and the migrations that moved them change Django's state only
(SeparateDatabaseAndState), so an existing database keeps its rows and no table is rebuilt.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from ctxeng.engine.limits import MAX_NAME


class Role(models.TextChoices):
    AGENT = "agent"
    REVIEWER = "reviewer"
    POLICY_EDITOR = "policy_editor"
    ADMIN = "admin"


class Tenant(models.Model):
    slug = models.SlugField(max_length=MAX_NAME, unique=True)
    name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "manifests_tenant"
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=Role.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "manifests_membership"
        constraints = [models.UniqueConstraint(fields=["user", "tenant", "role"], name="membership_unique_role")]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} as {self.role}"


class TimeDisplay(models.TextChoices):
    """How the dashboard shows a timestamp: in UTC (the default), or in the browser's own zone."""

    UTC = "utc"
    LOCAL = "local"


class Profile(models.Model):
    """A user's dashboard settings (one row per user, made on the first change)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="dashboard_profile")
    time_display = models.CharField(max_length=8, choices=TimeDisplay.choices, default=TimeDisplay.UTC)

    def __str__(self) -> str:
        return f"{self.user} ({self.time_display})"
