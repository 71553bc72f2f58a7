"""Policy and PolicyRevision.

A revision's body is a ContextPolicy (validated by the engine), its digest the engine's
`policy_digest`. Status runs draft -> published -> retired. A published (or retired) revision is
immutable: `save()` refuses any change to its body, digest or number, so no code path can edit
what a manifest already cites. At most one revision per policy is published (a partial unique
constraint); publishing retires the previous one (policies.services.revision_publish).
ImpactPreview is one run of the impact preview job over a revision (policies.services).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from ctxeng.engine.limits import MAX_ID
from ctxeng.server.errors import Immutable


class Policy(models.Model):
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.CASCADE, related_name="policies")
    policy_id = models.CharField(max_length=MAX_ID)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["policy_id"]
        verbose_name_plural = "policies"
        constraints = [models.UniqueConstraint(fields=["tenant", "policy_id"], name="policy_unique_per_tenant")]

    def __str__(self) -> str:
        return self.policy_id


class RevisionStatus(models.TextChoices):
    DRAFT = "draft"
    PUBLISHED = "published"
    RETIRED = "retired"


class PolicyRevision(models.Model):
    policy = models.ForeignKey(Policy, on_delete=models.CASCADE, related_name="revisions")
    revision = models.PositiveIntegerField()
    body = models.JSONField(help_text="the ContextPolicy, with defaults filled in")
    digest = models.CharField(max_length=80)
    source_text = models.TextField(
        blank=True, help_text="the YAML the body was read from, comments and layout kept; empty for a JSON body"
    )
    status = models.CharField(max_length=10, choices=RevisionStatus.choices, default=RevisionStatus.DRAFT)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    published_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    published_at = models.DateTimeField(null=True, blank=True)
    publish_note = models.TextField(blank=True)
    retired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["policy_id", "revision"]
        constraints = [
            models.UniqueConstraint(fields=["policy", "revision"], name="revision_unique_number"),
            models.UniqueConstraint(
                fields=["policy"], condition=Q(status="published"), name="one_published_revision_per_policy"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.policy.policy_id}/{self.revision} ({self.status})"

    _SEALED_FIELDS = ("body", "digest", "source_text", "revision", "policy_id", "created_by_id", "published_by_id", "published_at")

    def save(self, *args, **kwargs) -> None:
        if not self._state.adding and self.pk is not None:
            stored = type(self).objects.filter(pk=self.pk).first()
            if stored is not None and stored.status != RevisionStatus.DRAFT:
                changed = [f for f in self._SEALED_FIELDS if getattr(stored, f) != getattr(self, f)]
                if stored.status == RevisionStatus.PUBLISHED and self.status == RevisionStatus.DRAFT:
                    changed.append("status")
                if stored.status == RevisionStatus.RETIRED and self.status != RevisionStatus.RETIRED:
                    changed.append("status")
                if changed:
                    raise Immutable(
                        f"policy revision {stored} is {stored.status} and immutable; "
                        f"refused change to {', '.join(changed)}"
                    )
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        if self.status != RevisionStatus.DRAFT:
            raise Immutable(f"policy revision {self} is {self.status} and cannot be deleted")
        return super().delete(*args, **kwargs)


class PreviewStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    CANCELED = "canceled"
    FAILED = "failed"


ACTIVE_PREVIEW_STATUSES = (PreviewStatus.QUEUED, PreviewStatus.RUNNING)


class ImpactPreview(models.Model):
    """One run of the impact preview: a revision's body replayed over the policy's recent requests.

    Started by a policy editor (POST), run as a job (Celery with REDIS_URL, on a thread of the
    service's process after commit otherwise); `done` of `total` replays is its progress, `rows` the result so far. A cancel sets
    `cancel_requested`, which the runner reads between replays. `digest` is the revision's digest
    when the preview started: a draft edited since makes the result stale, and the page says so.
    A preview of the editor's unsaved text keeps that body in `body` (and its digest in `digest`).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    revision = models.ForeignKey(PolicyRevision, on_delete=models.CASCADE, related_name="impact_previews")
    digest = models.CharField(max_length=80)
    body = models.JSONField(null=True, blank=True,
                            help_text="the unsaved body replayed (the editor's text); null: the revision's saved body")
    status = models.CharField(max_length=10, choices=PreviewStatus.choices, default=PreviewStatus.QUEUED)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    rows = models.JSONField(default=list, help_text="one entry per replayed request, in order")
    selection = models.JSONField(
        default=dict, blank=True,
        help_text="which recorded requests it replays: runs (ids), since / until (dates, UTC), limit; {}: the latest 20",
    )
    stopped_reason = models.CharField(max_length=200, blank=True,
                                      help_text="why fewer than `total` were replayed (canceled, time limit)")
    error = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["revision", "-created_at"], name="impact_revision_time")]

    def __str__(self) -> str:
        return f"impact of {self.revision_id} ({self.status}, {self.done}/{self.total})"

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_PREVIEW_STATUSES

    @property
    def unsaved(self) -> bool:
        return self.body is not None
