"""Assembly jobs and their sealed results, in a tenant (ctxeng.accounts).

- Run / AssemblyJob: the job row is the source of truth for an assembly; it is saved first,
  enqueued on commit, claimed with a guarded status change and ends `ready | blocked | failed`.
  A *recorded* job (`origin`) was assembled in the agent's process and sent with its manifest
  (`POST recorded-steps/`): it is saved final, and its `verification` goes from `pending` to
  `verified | diverged | unverifiable` when a worker has re-assembled it.
- Manifest: the sealed ContextAssemblyManifest document and the provider input, one per job
  (a unique constraint), immutable once written. The manifest page reads `Manifest.sections` (the
  small sections, derived at seal time) and pages the item tables from ManifestItem rows, so its
  cost does not grow with the manifest.
- ItemDecision / ManifestItem: one item's sealed decision, stored once per tenant (keyed by the
  digest of its record) with the columns the dashboard filters and searches on; a ManifestItem
  row places a decision in a manifest. "Every manifest where X was excluded, and why" is one
  indexed query, and a step that repeats the last step's decisions adds three integers per item.
- Artifact: an externalized object a candidate may name with `artifact_ref` for re-injection.

Content is stored by reference (ctxeng.content): the job's request, the manifest's document and
payload are *skeletons* (`*_packed`, JSON text) naming blobs kept once per tenant by sha256, and an
artifact's body is the blob its `content_hash` names. Read them with manifests.selectors
(`job_request`, `manifest_document`, `manifest_payload`, `artifact_content`).
- UsageReport: the provider's actual token usage, stored beside the estimate; it never changes
  the sealed manifest.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from ctxeng.engine.limits import MAX_ID, MAX_ITEM_ID, MAX_NAME
from ctxeng.server.errors import Immutable

from .item_labels import LABEL_CHARS

__all__ = ["Immutable"]  # kept importable from here: the sealed records below raise it


class Run(models.Model):
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.CASCADE, related_name="runs")
    run_id = models.CharField(max_length=MAX_ID)
    created_at = models.DateTimeField(auto_now_add=True)
    closed_at = models.DateTimeField(
        null=True, blank=True, help_text="closing a run closes its task: later steps see a task_closed event"
    )
    recorded_dropped = models.PositiveIntegerField(
        default=0, help_text="steps of the run the agent's recorder dropped at its bounds (never sent), as it reported"
    )

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["tenant", "run_id"], name="run_unique_per_tenant")]

    def __str__(self) -> str:
        return self.run_id


class JobStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    READY = "ready"
    BLOCKED = "blocked"
    FAILED = "failed"


FINAL_STATUSES = (JobStatus.READY, JobStatus.BLOCKED, JobStatus.FAILED)


class Origin(models.TextChoices):
    REMOTE = "remote", "assembled by the service"
    RECORDED = "recorded", "assembled in the agent's process, recorded"


class Verification(models.TextChoices):
    """A recorded step re-assembled on a worker (manifests.services.recorded_step_verify)."""

    PENDING = "pending"
    VERIFIED = "verified"
    DIVERGED = "diverged"
    UNVERIFIABLE = "unverifiable"


class AssemblyJob(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.CASCADE, related_name="jobs")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="jobs")
    step_id = models.CharField(max_length=MAX_ID)
    request_packed = models.TextField(help_text="the AssemblyRequest as submitted, packed (ctxeng.content)")
    request_digest = models.CharField(max_length=80)
    idempotency_key = models.CharField(max_length=MAX_ID, null=True, blank=True)
    policy_revision = models.ForeignKey(
        "policies.PolicyRevision", on_delete=models.PROTECT, related_name="jobs"
    )
    status = models.CharField(max_length=10, choices=JobStatus.choices, default=JobStatus.QUEUED)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    traceparent = models.CharField(
        max_length=55, blank=True,
        help_text="the submit's W3C traceparent: the assembly span and its usage spans join its trace (ctxeng.telemetry)",
    )
    origin = models.CharField(max_length=10, choices=Origin.choices, default=Origin.REMOTE)
    verification = models.CharField(
        max_length=12, choices=Verification.choices, blank=True,
        help_text="recorded steps only: the worker's re-assembly under the same policy revision",
    )
    verification_detail = models.TextField(
        blank=True, help_text="the first difference (diverged), what the service lacks (unverifiable), what matched (verified)"
    )
    verified_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="job_unique_idempotency_key",
            ),
        ]
        indexes = [models.Index(fields=["status", "heartbeat_at"], name="job_status_heartbeat"),
                   models.Index(fields=["tenant", "verification"], name="job_tenant_verification")]

    def __str__(self) -> str:
        return f"{self.run.run_id}/{self.step_id} ({self.status})"

    @property
    def is_final(self) -> bool:
        return self.status in FINAL_STATUSES


class OrderedJSONField(models.TextField):
    """JSON kept as its text, so a dict reads back in the order it was written on every database
    (PostgreSQL's jsonb would sort the keys: the page would list a record's checks in another
    order than the sealed manifest). Not queryable by key: what SQL filters on gets a column."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return None if value is None else json.loads(value)

    def to_python(self, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    def get_prep_value(self, value: Any) -> Any:
        return None if value is None else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class ManifestQuerySet(models.QuerySet):
    """Bulk writes would bypass `Manifest.save`'s guard, so they are refused outright."""

    def update(self, **kwargs):
        raise Immutable("manifests are sealed; bulk update refused (content purge: manifest_purge_content)")

    def bulk_update(self, objs, fields, batch_size=None):
        raise Immutable("manifests are sealed; bulk update refused (content purge: manifest_purge_content)")


class Manifest(models.Model):
    job = models.OneToOneField(AssemblyJob, on_delete=models.CASCADE, related_name="manifest")
    assembly_id = models.CharField(max_length=MAX_ID)
    status = models.CharField(max_length=10)
    document_packed = models.TextField(help_text="the sealed ContextAssemblyManifest, packed (ctxeng.content)")
    payload_packed = models.TextField(
        null=True, blank=True, help_text="the serialized model input, packed; null when blocked or purged"
    )
    assembly_input_hash = models.CharField(max_length=80, blank=True)
    serialized_model_input_hash = models.CharField(max_length=80, blank=True)
    estimated_input_tokens = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    content_purged_at = models.DateTimeField(
        null=True, blank=True, help_text="when retention removed the content bodies (manifest_purge_content)"
    )
    sections = OrderedJSONField(
        null=True, blank=True,
        help_text="the small sections the manifest page shows, derived at seal time (no content bodies)",
    )
    # What lists and groups of manifests filter, group and show, copied out of the document.
    blocked_reason = models.TextField(blank=True)
    usable_input = models.PositiveIntegerField(null=True, blank=True)
    model_provider = models.TextField(blank=True)
    model_name = models.TextField(blank=True)

    objects = ManifestQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.assembly_id

    _PURGED_FIELDS = ("document_packed", "payload_packed", "content_purged_at")

    def save(self, *args, **kwargs) -> None:
        # The one change a sealed manifest accepts is the content purge of manifests.retention,
        # done once (manifests.services.manifest_purge_content); anything else is refused.
        if not self._state.adding:
            stored = type(self).objects.filter(pk=self.pk).select_related("job").first()
            if stored is None or not self._is_content_purge_of(stored):
                raise Immutable(f"manifest {self.assembly_id} is sealed and cannot be changed")
            kwargs["update_fields"] = self._PURGED_FIELDS
        super().save(*args, **kwargs)

    def _is_content_purge_of(self, stored: Manifest) -> bool:
        from ctxeng.content.packing import UnpackError
        from ctxeng.content.store import content_read

        from .retention import purged_document

        unchanged = all(
            field.value_from_object(self) == field.value_from_object(stored)
            for field in self._meta.concrete_fields
            if field.name not in self._PURGED_FIELDS
        )
        if not (unchanged and stored.content_purged_at is None and self.content_purged_at is not None
                and self.payload_packed is None):
            return False
        tenant_id = stored.job.tenant_id
        try:
            written = content_read(tenant_id=tenant_id, skeleton=self.document_packed)
        except UnpackError:  # names content the store does not hold: not the purge's document
            return False
        return written == purged_document(content_read(tenant_id=tenant_id, skeleton=stored.document_packed))

    def delete(self, *args, **kwargs):
        raise Immutable(f"manifest {self.assembly_id} is sealed and cannot be deleted")


class Decision(models.TextChoices):
    INCLUDED = "included"
    EXCLUDED = "excluded"


class ItemDecision(models.Model):
    """One item's sealed decision, once per tenant: keyed by the digest of its record (the JSON blob
    in the content store the manifest document names), with the columns the dashboard filters,
    groups and searches on. Never changed but for its display `label`: the content purge blanks it
    once no unpurged manifest uses the decision, a later seal that reuses it fills it again; the
    purge deletes the ones no manifest uses."""

    # No index of its own: the unique (tenant, digest) index serves every lookup by tenant.
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.CASCADE, related_name="+", db_index=False)
    digest = models.CharField(max_length=80, help_text="sha256 of the packed record (its content blob)")
    item_id = models.CharField(max_length=MAX_ITEM_ID)
    decision = models.CharField(max_length=10, choices=Decision.choices)
    # Text, not a bounded column: an admission reason is written by the engine and may quote a
    # policy's partition name (escaped, so longer than the name), never refused at submit.
    reason = models.TextField(blank=True, help_text="exclusion reason, or the admission reason")
    hard_gate = models.CharField(max_length=60, blank=True)
    detail = models.TextField(blank=True)
    partition = models.CharField(max_length=MAX_NAME, blank=True)
    zone = models.CharField(max_length=60, blank=True)
    tokens = models.PositiveIntegerField(null=True, blank=True)
    trust = models.CharField(max_length=60, blank=True)
    role = models.CharField(max_length=60, blank=True)
    kind = models.CharField(max_length=MAX_NAME)
    source_type = models.CharField(max_length=MAX_NAME)
    source_ref = models.JSONField(default=dict)
    epoch = models.PositiveBigIntegerField(default=0, help_text="the content purge epoch of its last use")
    # Written at seal from the submitted request (manifests.item_labels.candidate_label), so the
    # pages that list many items (the run's matrix, the inspector's list) name a message by its
    # first words without reading any request. Untrusted text, escaped where shown.
    label = models.CharField(
        max_length=LABEL_CHARS, blank=True,
        help_text="what a reviewer recognises the item by: a tool result's call, a message's first words; "
                  "blank when sealed before migration 0011 or purged, until a seal reuses it",
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "digest"], name="item_decision_unique_per_tenant")]
        indexes = [models.Index(fields=["tenant", "item_id", "decision"], name="item_decision_lookup")]

    def __str__(self) -> str:
        return f"{self.item_id}: {self.decision}"

    def save(self, *args, **kwargs) -> None:
        if not self._state.adding:
            raise Immutable("item decisions are sealed with their manifests")
        super().save(*args, **kwargs)


# The decision's columns, read through a ManifestItem row as if they were its own.
ITEM_COLUMNS = ("item_id", "decision", "reason", "hard_gate", "detail", "partition", "zone", "tokens", "trust",
                "role", "kind", "source_type", "source_ref", "label")


class ManifestItemQuerySet(models.QuerySet):
    def with_columns(self) -> ManifestItemQuerySet:
        return self.annotate(**{name: models.F(f"entry__{name}") for name in ITEM_COLUMNS},
                             record_digest=models.F("entry__digest"))


class ManifestItemManager(models.Manager.from_queryset(ManifestItemQuerySet)):
    def get_queryset(self) -> ManifestItemQuerySet:
        return super().get_queryset().with_columns()


class ManifestItem(models.Model):
    """A decision in a manifest. A manifest's rows are written in the dashboard's default order
    (included, then exclusion reasons in ExclusionReason order, each in document order), so that
    list pages by id; `position` is the item's place in the document."""

    manifest = models.ForeignKey(Manifest, on_delete=models.CASCADE, related_name="items")
    entry = models.ForeignKey(ItemDecision, on_delete=models.PROTECT, related_name="+")
    position = models.PositiveIntegerField(default=0, help_text="the item's place in the sealed document (included, then excluded)")

    objects = ManifestItemManager()
    bare = models.Manager()  # the row alone: counts and id ranges without the decision's join

    class Meta:
        ordering = ["manifest_id", "id"]
        # An item of one manifest by its decision (the inspector's rows by item id).
        indexes = [models.Index(fields=["manifest", "entry"], name="item_manifest_entry")]

    def __str__(self) -> str:
        return f"{self.manifest_id}/{self.entry_id}"

    def save(self, *args, **kwargs) -> None:
        if not self._state.adding:
            raise Immutable("manifest item rows are sealed with their manifest")
        super().save(*args, **kwargs)


class Artifact(models.Model):
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.CASCADE, related_name="artifacts")
    artifact_id = models.CharField(max_length=MAX_ITEM_ID)
    revision = models.CharField(max_length=MAX_NAME)
    kind = models.CharField(max_length=MAX_NAME)
    content_hash = models.CharField(max_length=80, help_text="sha256 of the body, the blob in the content store")
    writer = models.CharField(max_length=MAX_ID)
    scope = models.CharField(max_length=MAX_ITEM_ID)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["artifact_id", "-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "artifact_id", "revision"], name="artifact_unique_revision")
        ]

    def __str__(self) -> str:
        return f"{self.artifact_id}@{self.revision}"

    def save(self, *args, **kwargs) -> None:
        if not self._state.adding:
            raise Immutable(f"artifact {self} is stored; write a new revision instead")
        super().save(*args, **kwargs)


class UsageReport(models.Model):
    manifest = models.OneToOneField(Manifest, on_delete=models.CASCADE, related_name="usage")
    input_tokens = models.PositiveIntegerField()
    cached_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    estimated_input_tokens = models.PositiveIntegerField(help_text="the engine's estimate, copied for calibration")
    reported_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    reported_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"usage for {self.manifest_id}"
