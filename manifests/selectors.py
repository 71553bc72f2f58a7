"""Reads for jobs, manifests, item decisions and artifacts, and what the engine reads from the
store for a job (its tenant's artifacts, the lifecycle events its records imply). The tenancy
reads (`tenants_for`, `roles_in`, `tenant_for_role`) are ctxeng.accounts.selectors.

Every selector that returns tenant data takes the acting user and filters by the user's tenants,
so another tenant's object is simply not found (404), never "forbidden" (which would confirm it
exists).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from ctxeng.accounts.models import Membership, Tenant
from ctxeng.accounts.selectors import tenants_for
from ctxeng.content.store import content_fetch, content_read, content_read_many
from ctxeng.engine import (
    AssemblyRequest,
    ContextPolicy,
    StoredArtifact,
    replaced_revision_events,
    with_events,
)
from ctxeng.engine.estimators import bounded_calibration, calibrate, estimate_for
from ctxeng.engine.lifecycle import named_artifact
from ctxeng.engine.models import Calibration, LifecycleEventRecord, ModelSpec
from ctxeng.engine.request_models import PreviousCache
from ctxeng.engine.vocabulary import LifecycleEvent
from ctxeng.server.errors import NotFound
from ctxeng.server.rate_limits import slots_release, slots_take

from .models import (
    FINAL_STATUSES,
    Artifact,
    AssemblyJob,
    JobStatus,
    Manifest,
    ManifestItem,
    Origin,
    UsageReport,
)


def jobs_for(
    user: AbstractBaseUser, *, run_id: str | None = None, status: str | None = None, policy: str | None = None,
    origin: str | None = None, verification: str | None = None,
) -> QuerySet[AssemblyJob]:
    jobs = (
        AssemblyJob.objects.filter(tenant__in=tenants_for(user))
        .select_related("run", "tenant", "policy_revision__policy", "manifest")
        # Listing jobs loads no skeletons; documents are fetched one by one.
        .defer("request_packed", "policy_revision__body", "manifest__document_packed", "manifest__payload_packed")
    )
    if run_id:
        jobs = jobs.filter(run__run_id=run_id)
    if status:
        jobs = jobs.filter(status=status)
    if policy:
        jobs = jobs.filter(policy_revision__policy__policy_id=policy)
    if origin:
        jobs = jobs.filter(origin=origin)
    if verification:
        jobs = jobs.filter(verification=verification)
    return jobs.order_by("-created_at")


def job_get(user: AbstractBaseUser, job_id: str | uuid.UUID) -> AssemblyJob:
    try:
        key = uuid.UUID(str(job_id))
    except ValueError:
        raise NotFound(f"assembly {job_id}: not found") from None
    job = jobs_for(user).filter(id=key).first()
    if job is None:
        raise NotFound(f"assembly {job_id}: not found")
    return job


def job_get_when_final(
    user: AbstractBaseUser, job_id: str | uuid.UUID, *, wait: float, first_pause: float = 0.02, longest_pause: float = 0.25
) -> AssemblyJob:
    """The job (a long-poll): as soon as it is final, or as it is once `wait` seconds have passed.

    Each look is one query of the job's status in autocommit, so no transaction stays open while
    this sleeps and the next look sees what a worker committed meanwhile; the pauses between looks
    start at `first_pause` and double up to `longest_pause`. Inside a transaction (a test's, or
    ATOMIC_REQUESTS) it does not wait at all: sleeping there would hold the transaction open.
    """
    job = job_get(user, job_id)
    if job.is_final or wait <= 0 or connection.in_atomic_block:
        return job
    return _wait_until_final(user, job, wait=wait, first_pause=first_pause, longest_pause=longest_pause)


def _wait_until_final(user: AbstractBaseUser, job: AssemblyJob, *, wait: float, first_pause: float = 0.02,
                      longest_pause: float = 0.25) -> AssemblyJob:
    deadline = time.monotonic() + wait
    pause = first_pause
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(pause, left))
        pause = min(pause * 2, longest_pause)
        if AssemblyJob.objects.filter(pk=job.pk, status__in=FINAL_STATUSES).exists():
            break
    return job_get(user, job.id)  # as it is now (running, perhaps, when it was queued)


# A long-poll's slot outlives its wait by this much at most: a worker killed mid-wait (gunicorn's
# --timeout is 60 s) leaves no `finally` to give it back, so it expires on its own.
LONGPOLL_SLOT_GRACE_SECONDS = 30
# Retry-After of a long-poll answered at once because the caps were reached: soon enough for a job
# that becomes final meanwhile, and a capped client's polls stay one request per this many seconds.
LONGPOLL_RETRY_AFTER_SECONDS = 2


def longpoll_counters(tenant_id: int) -> list[tuple[str, int]]:
    """The slot counters a long-poll of a job of this tenant holds: overall and its tenant's."""
    return [("longpoll:total", settings.CTXENG_LONGPOLL_MAX_TOTAL),
            (f"longpoll:tenant:{tenant_id}", settings.CTXENG_LONGPOLL_MAX_PER_TENANT)]


def job_long_poll(user: AbstractBaseUser, job_id: str | uuid.UUID, *, wait: float) -> tuple[AssemblyJob, int | None]:
    """`job_get_when_final` within the long-poll caps: (the job, None) after waiting as it says,
    or, when CTXENG_LONGPOLL_MAX_TOTAL or the job's tenant's CTXENG_LONGPOLL_MAX_PER_TENANT
    long-polls are held already (or the slot counter cannot be reached), (the job as it is now,
    the seconds to retry after) at once, without waiting: each waiting request holds a sync web
    worker, and unbounded they starved every tenant and /healthz (issue 40, finding 2)."""
    job = job_get(user, job_id)
    if job.is_final or wait <= 0 or connection.in_atomic_block:
        return job, None
    counters = longpoll_counters(job.tenant_id)
    holder = slots_take(counters, wait + LONGPOLL_SLOT_GRACE_SECONDS)
    if holder is None:
        return job, LONGPOLL_RETRY_AFTER_SECONDS
    try:
        return _wait_until_final(user, job, wait=wait), None
    finally:
        slots_release(counters, holder)


def job_manifest(job: AssemblyJob) -> Manifest | None:
    return Manifest.objects.filter(job=job).first()


# --------------------------------------------------------------------------- documents by reference


def job_request(job: AssemblyJob, *, remember: bool = False, keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The request as the agent submitted it, rebuilt from the content store (`remember`: through
    this process's read memo, as the worker reads it: `content_read`; `keys`: only those top-level
    fields)."""
    skeleton = job.__dict__.get("request_packed")  # loaded with the job unless deferred
    if skeleton is None:
        skeleton = AssemblyJob.objects.filter(pk=job.pk).values_list("request_packed", flat=True).first()
    return content_read(tenant_id=job.tenant_id, skeleton=skeleton or "{}", remember=remember, keys=keys)


def manifest_document(manifest: Manifest, *, sections: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The sealed manifest document (or only its named top-level `sections`)."""
    skeleton, tenant_id = Manifest.objects.filter(pk=manifest.pk).values_list(
        "document_packed", "job__tenant_id").first() or ("{}", None)
    return content_read(tenant_id=tenant_id, skeleton=skeleton, keys=sections)


def manifest_as_served(manifest: Manifest) -> dict[str, Any]:
    """The sealed document as the API serves it (and the dashboard downloads it): once the provider
    reported its usage, `budget.actual_input_tokens` carries that count. The sealed row never
    changes; only the served copy does."""
    document = manifest_document(manifest)
    usage = UsageReport.objects.filter(manifest=manifest).only("input_tokens").first()
    if usage is not None and isinstance(document.get("budget"), dict):
        document = {**document, "budget": {**document["budget"], "actual_input_tokens": usage.input_tokens}}
    return document


def manifest_payload(manifest: Manifest) -> Any:
    """The serialized model input; None when blocked or purged."""
    skeleton, tenant_id = Manifest.objects.filter(pk=manifest.pk).values_list(
        "payload_packed", "job__tenant_id").first() or (None, None)
    return None if skeleton is None else content_read(tenant_id=tenant_id, skeleton=skeleton)


def item_record_of(row: ManifestItem) -> dict[str, Any]:
    """The full sealed record of one ManifestItem row (its decision's record blob)."""
    entry = row.entry
    return content_read_many(tenant_id=entry.tenant_id, digests=[entry.digest])[entry.digest]


def artifact_content(artifact: Artifact) -> str | None:
    """An artifact's body: the blob its content_hash names in its tenant's store."""
    found = content_fetch(tenant_id=artifact.tenant_id, digests=[artifact.content_hash])
    return _text(found.get(artifact.content_hash))


def _text(data: bytes | None) -> str | None:
    """An artifact body's text as it was stored (lone surrogates included)."""
    return None if data is None else data.decode("utf-8", "surrogatepass")


def item_decisions(user: AbstractBaseUser, item_id: str) -> QuerySet[ManifestItem]:
    """Every manifest where `item_id` appeared, newest first: one indexed query on item_id."""
    return (
        ManifestItem.objects.filter(entry__tenant__in=tenants_for(user), entry__item_id=item_id)
        .select_related("manifest__job__run", "manifest__job__tenant")
        .order_by("-manifest__created_at", "id")
    )


def artifacts_for(user: AbstractBaseUser, *, artifact_id: str | None = None) -> QuerySet[Artifact]:
    artifacts = Artifact.objects.filter(tenant__in=tenants_for(user)).select_related("tenant")
    if artifact_id:
        artifacts = artifacts.filter(artifact_id=artifact_id)
    return artifacts


def artifact_for_ref(*, tenant: Tenant, artifact_id: str, revision: int | str | None) -> Artifact | None:
    """The artifact a candidate's artifact_ref names, in the request's tenant; newest if no revision."""
    artifacts = Artifact.objects.filter(tenant=tenant, artifact_id=artifact_id)
    if revision is not None:
        artifacts = artifacts.filter(revision=str(revision))
    return artifacts.order_by("-created_at", "-id").first()


# --------------------------------------------------------------------------- what the engine reads from the store


class StoredArtifacts:
    """The stored artifacts a request may ask for, read in one query: every revision of the ids its
    items name (artifact_ref or source_ref) and of its summaries' input ids (its checkpoint's
    included), oldest first. The lifecycle events and the engine's lookups of one job both read
    them from here; a lookup of an id outside that set still reads the store."""

    FIELDS = ("artifact_id", "revision", "kind", "content_hash", "writer", "scope", "created_by_id")

    def __init__(self, tenant: Tenant, request: AssemblyRequest) -> None:
        self.tenant = tenant
        self.named = {n for n in (named_artifact(i) for i in request.candidates) if n is not None}
        inputs = [i for item in request.candidates for i in (item.input_item_ids or [])]
        if request.checkpoint is not None:  # the engine adds its summary, which names inputs too
            inputs += request.checkpoint.input_item_ids
        self.ids = {artifact_id for artifact_id, _ in self.named} | set(inputs)
        self.revisions: dict[str, list[dict[str, Any]]] = {}
        if self.ids:
            rows = Artifact.objects.filter(tenant=tenant, artifact_id__in=sorted(self.ids)).order_by("created_at", "id")
            for row in rows.values(*self.FIELDS):
                self.revisions.setdefault(row["artifact_id"], []).append(row)

    def row(self, artifact_id: str, revision: int | str | None) -> dict[str, Any] | None:
        """The revision named (the newest when None), as `artifact_for_ref` would find it."""
        rows = self.revisions.get(artifact_id, [])
        if revision is not None:
            rows = [r for r in rows if r["revision"] == str(revision)]
        return rows[-1] if rows else None


def artifact_lookup(tenant: Tenant, stored: StoredArtifacts) -> Callable[[str, int | str | None], StoredArtifact | None]:
    """The engine's artifact lookup for one job: the job's tenant only, each revision read once.
    The ids `stored` (read for the job's request) covers are answered from it, and the first body
    asked for brings every body the request may ask for (the revisions it names, the newest of its
    summaries' inputs) in one content read."""
    loaded: dict[tuple[str, str | None], StoredArtifact | None] = {}
    bodies: dict[str, bytes] = {}
    named_read = False

    def body(row: dict[str, Any]) -> str:
        nonlocal named_read
        if not named_read:
            named_read = True
            asked = [*stored.named, *((i, None) for i in stored.ids)]  # the revisions named, the newest of inputs
            digests = {r["content_hash"] for r in (stored.row(a, v) for a, v in asked) if r is not None}
            bodies.update(content_fetch(tenant_id=tenant.pk, digests=sorted(digests | {row["content_hash"]})))
        if row["content_hash"] not in bodies:
            bodies.update(content_fetch(tenant_id=tenant.pk, digests=[row["content_hash"]]))
        return _text(bodies.get(row["content_hash"])) or ""

    def lookup(artifact_id: str, revision: int | str | None) -> StoredArtifact | None:
        key = (artifact_id, None if revision is None else str(revision))
        if key not in loaded:
            if artifact_id in stored.ids:
                row = stored.row(artifact_id, revision)
            else:
                found = artifact_for_ref(tenant=tenant, artifact_id=artifact_id, revision=revision)
                row = None if found is None else {f: getattr(found, f) for f in StoredArtifacts.FIELDS}
            loaded[key] = None if row is None else StoredArtifact(
                artifact_id=row["artifact_id"], revision=row["revision"], kind=row["kind"], content=body(row),
                content_hash=row["content_hash"], writer=row["writer"], scope=row["scope"],
            )
        return loaded[key]

    return lookup


def lifecycle_events_for(*, job: AssemblyJob, request: AssemblyRequest, stored: StoredArtifacts) -> list[LifecycleEventRecord]:
    """The lifetime events the service knows of for this job (policy `expiry.on` filters them later):

    - revision_replaced: an item names an artifact revision older than the tenant's newest;
    - permission_revoked: an item names an artifact whose writing user no longer holds a membership
      in the tenant (the membership was revoked, so what it wrote is revoked with it);
    - task_closed: the job's run was closed (`run_close`), which closes the request's task scope.
    """
    ids = sorted({artifact_id for artifact_id, _ in stored.named})
    events: list[LifecycleEventRecord] = []
    if ids:
        rows = [r for artifact_id in ids for r in stored.revisions.get(artifact_id, [])]
        revisions = {artifact_id: [r["revision"] for r in stored.revisions[artifact_id]] for artifact_id in ids if artifact_id in stored.revisions}
        events.extend(replaced_revision_events(request, revisions))
        writers = {r["created_by_id"] for r in rows if r["created_by_id"] is not None}
        members = set(Membership.objects.filter(tenant=job.tenant, user_id__in=writers).values_list("user_id", flat=True)) if writers else set()
        revoked = sorted({r["artifact_id"] for r in rows if r["created_by_id"] is not None and r["created_by_id"] not in members})
        events.extend(
            LifecycleEventRecord(
                event=LifecycleEvent.PERMISSION_REVOKED, artifact_id=artifact_id, emitted_by="service",
                detail="the membership of the user who wrote it was revoked",
            )
            for artifact_id in revoked
        )
    if job.run.closed_at is not None:
        events.append(
            LifecycleEventRecord(
                event=LifecycleEvent.TASK_CLOSED, scope=request.scope, emitted_by="service",
                detail=f"run {job.run.run_id} was closed at {job.run.closed_at.isoformat()}",
            )
        )
    return events


def request_as_assembled(*, job: AssemblyJob, request: AssemblyRequest, policy: ContextPolicy) -> tuple[AssemblyRequest, Callable[[str, int | str | None], StoredArtifact | None]]:
    """`request` as a worker assembles it under `policy` (the worker with the job's revision, the
    impact preview with a draft): pinned to that revision, with the lifecycle events the store
    implies; and the artifact lookup to pass to `assemble` with it. Both read the artifacts the
    request names from one query."""
    pinned = request.pinned_to(policy.policy.revision)
    stored = StoredArtifacts(job.tenant, pinned)
    return with_events(pinned, policy, lifecycle_events_for(job=job, request=pinned, stored=stored)), artifact_lookup(job.tenant, stored)


def previous_step_cache(*, job: AssemblyJob) -> PreviousCache | None:
    """The cache record a remote job compares with (issue 51, N10): that of the run's previous
    step as the service sealed it, never the `previous_cache` its request carries (an agent could
    send back its own step's hashes and make it 100% cache-eligible). The previous step is the
    latest `ready` job of the same tenant's same run submitted before this one, under another step
    id (a blocked step sent nothing, so the provider's cache still holds the step before it: what
    the SDK sends too); None when there is none (the run's first step). A recorded step's record is
    the agent's own: its identity and keys are kept, its payload hashes are not (the service
    stored no payload of it), so nothing is eligible after it (`previous_prefix_hashes_unknown`).
    Two queries."""
    earlier = Q(created_at__lt=job.created_at) | Q(created_at=job.created_at, pk__lt=job.pk)
    previous = (AssemblyJob.objects.filter(earlier, tenant_id=job.tenant_id, run_id=job.run_id,
                                           status=JobStatus.READY, manifest__isnull=False)
                .exclude(step_id=job.step_id).order_by("-created_at", "-pk")
                .values_list("manifest", "origin").first())
    if previous is None:
        return None
    manifest_pk, origin = previous
    cache = manifest_document(Manifest(pk=manifest_pk), sections=("cache",)).get("cache") or {}
    return PreviousCache.model_validate({
        "prefix_identity": cache.get("prefix_identity"),
        "invalidation_keys": cache.get("invalidation_keys") or {},
        "payload_prefix_hashes": (cache.get("payload_prefix_hashes") or []) if origin == Origin.REMOTE else [],
    })


# --------------------------------------------------------------------------- token calibration

# The newest reports of a model that its calibration reads: enough for a 0.99 quantile to rest on
# several reports, few enough to follow a provider's tokenizer change within days.
CALIBRATION_WINDOW = 500


def usage_in_band(prefix: str = "") -> Q:
    """The usage reports calibration reads: an estimate above 0 and an actual count within
    [CTXENG_USAGE_RATIO_MIN, CTXENG_USAGE_RATIO_MAX] times it. The others are outliers: stored and
    shown, never calibrated on, so no report (a typo, a bug, an agent steering its tenant's budget)
    moves the factor past the band. `prefix`: the path to the report from the queried model."""
    estimated = F(f"{prefix}estimated_input_tokens")
    return Q(**{f"{prefix}estimated_input_tokens__gt": 0,
                f"{prefix}input_tokens__gte": estimated * settings.CTXENG_USAGE_RATIO_MIN,
                f"{prefix}input_tokens__lte": estimated * settings.CTXENG_USAGE_RATIO_MAX})


def usage_report_in_band(report: UsageReport) -> bool:
    """Whether calibration reads `report` (the rule of usage_in_band, asked of the database)."""
    return UsageReport.objects.filter(usage_in_band(), pk=report.pk).exists()


def usage_ratios(*, tenant_id: int, provider: str, model_name: str, window: int = CALIBRATION_WINDOW) -> list[float]:
    """actual / estimated input tokens of the tenant's newest `window` usage reports for this model
    within the plausible band (usage_in_band). One query."""
    rows = (
        UsageReport.objects.filter(usage_in_band(), manifest__job__tenant_id=tenant_id, manifest__model_provider=provider,
                                   manifest__model_name=model_name)
        .order_by("-reported_at", "-id")
        .values_list("input_tokens", "estimated_input_tokens")[:window]
    )
    return [actual / estimated for actual, estimated in rows]


def calibration_reference(*, tenant_id: int, model: ModelSpec, before: datetime) -> float | None:
    """The calibration factor of the tenant's newest manifest for `model` sealed at or before
    `before` (what was applied then); None when there is none."""
    row = (Manifest.objects.filter(job__tenant_id=tenant_id, model_provider=model.provider, model_name=model.name,
                                   created_at__lte=before)
           .order_by("-created_at", "-id").values_list("sections", flat=True).first())
    calibration = ((row or {}).get("assembly") or {}).get("calibration") if isinstance(row, dict) else None
    factor = calibration.get("factor") if isinstance(calibration, dict) else None
    return float(factor) if isinstance(factor, int | float) and 1 <= factor <= 4 else None


def model_calibration(*, tenant_id: int, model: ModelSpec, policy: ContextPolicy,
                      now: datetime | None = None) -> Calibration | None:
    """The calibration a job of this tenant assembles `model` with, under `policy`'s
    `budget.calibration`: None for a model counted exactly (no query; the engine applies 1.0).

    Bounded (issue 51, F3): a factor from reported usage is held within
    CTXENG_CALIBRATION_STEP_PER_HOUR of the factor applied to the tenant's newest manifest for the
    model sealed an hour or more before (the policy's default factor when there is none), so no
    set of usage reports, from one run or one token or all of them, moves the factor the tenant's
    other runs get by more than that in any hour. The manifest records the factor applied."""
    if estimate_for(model).exact:
        return None
    clause = policy.budget.calibration_clause
    ratios = usage_ratios(tenant_id=tenant_id, provider=model.provider, model_name=model.name)
    calibration = calibrate(model.name, ratios, clause)
    if calibration.basis != "reported usage":
        return calibration
    hour_ago = (now or timezone.now()) - timedelta(hours=1)
    reference = calibration_reference(tenant_id=tenant_id, model=model, before=hour_ago) or float(clause.default_factor)
    return bounded_calibration(calibration, reference=reference, step=settings.CTXENG_CALIBRATION_STEP_PER_HOUR)
