"""Writes for policies: create and edit drafts, publish, import from a file.

Each write records an audit event (audit.services) in the same transaction: created, edited,
published, and retired for the revision a publish replaces.

The impact preview is a job: `impact_preview_start` saves an ImpactPreview and hands it to the
runner on commit (Celery with REDIS_URL, a thread of this process otherwise: never the request);
`impact_preview_run` claims it, replays request after request (first the assemblies the body's
`upgrades` records address, then the policy's recent ones), saving the count after each and the
rows at most once a second, and stops early on a cancel or at CTXENG_IMPACT_TIME_LIMIT_SECONDS,
saying which.

A revision's body is validated by the engine (`parse_policy`) and stored normalized (defaults
filled in, `policy.digest` removed), so its digest is the one the engine records in manifests.
The text it was parsed from (the editor's YAML, an imported file) is kept beside it as
`source_text`, so comments and layout survive a save; a body that came as JSON has none.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from ctxeng.accounts.models import Tenant
from ctxeng.audit.models import AuditAction
from ctxeng.audit.services import revision_event
from ctxeng.engine import InvalidInput, parse_policy, policy_digest
from ctxeng.engine.errors import load_yaml_text
from ctxeng.engine.models import ContextPolicy
from ctxeng.engine.policy import policy_body
from ctxeng.engine.upgrades import failure_lines, shows
from ctxeng.server.errors import Conflict, ServiceError

from . import assemblies
from .models import (
    ACTIVE_PREVIEW_STATUSES,
    ImpactPreview,
    Policy,
    PolicyRevision,
    PreviewStatus,
    RevisionStatus,
)
from .selectors import upgrade_records_missing

logger = logging.getLogger(__name__)


def policy_parse(body: Any, *, policy_id: str | None = None, revision: int | None = None) -> ContextPolicy:
    """A policy body (YAML/JSON text or an object) validated by the engine, and bounded once parsed.

    The engine's YAML loader refuses anchors and aliases, so text cannot expand while it is
    parsed; the normalized body (what a revision stores and every page renders) must still fit
    in CTXENG_MAX_REQUEST_BYTES, the same bound the request itself had.
    """
    if isinstance(body, (str, bytes)):
        body = load_yaml_text(body, what="policy")
        if body is None:  # an empty text, or comments only
            raise InvalidInput(["body: the policy is empty"], what="policy")
    if isinstance(body, dict):
        policy = parse_policy(body)
    else:
        raise InvalidInput(["body: field required (a ContextPolicy object)"], what="policy")
    size = len(json.dumps(policy_body(policy), separators=(",", ":"), ensure_ascii=False).encode())
    if size > settings.CTXENG_MAX_REQUEST_BYTES:
        raise InvalidInput(
            [f"body: {size} bytes once parsed, more than the limit of {settings.CTXENG_MAX_REQUEST_BYTES} "
             "bytes (CTXENG_MAX_REQUEST_BYTES)"],
            what="policy",
        )
    if policy_id is not None and policy.policy.id != policy_id:
        raise InvalidInput(
            [f"body.policy.id: {policy.policy.id!r} does not match the policy in the URL {policy_id!r}"],
            what="policy",
        )
    if revision is not None and policy.policy.revision != revision:
        raise InvalidInput(
            [f"body.policy.revision: {policy.policy.revision} does not match the revision in the URL {revision}"],
            what="policy",
        )
    return policy


def policy_upgrade_addresses_check(*, tenant: Tenant, policy: ContextPolicy) -> None:
    """Each `upgrades[i].addresses[j]` must be the assembly id of a manifest of `tenant` that shows
    the failure `upgrades[i].shows` (seed §8: an upgrade answers confirmed failures, and its evidence
    shows that failure); InvalidInput naming each one that is not."""
    wanted = {a for record in policy.upgrades for a in record.addresses}
    if not wanted:
        return
    found = assemblies.records().documents_of(tenant=tenant, assembly_ids=wanted, sections=("assembly", "transforms", "excluded"))
    errors = []
    for i, record in enumerate(policy.upgrades):
        for j, a in enumerate(record.addresses):
            if a not in found:
                errors.append(f"upgrades[{i}].addresses[{j}]: {a!r} is not an assembly of tenant {tenant.slug!r}")
                continue
            # Evidence of *the* failure (seed §8), not any assembly: the manifest must record it.
            document = found[a]
            if not shows(document, record.shows):
                recorded = failure_lines(document)
                errors.append(
                    f"upgrades[{i}].addresses[{j}]: assembly {a!r} does not show the failure {record.shows!r} "
                    f"(upgrades[{i}].shows); it records {', '.join(repr(x) for x in recorded[:6]) if recorded else 'no failure'}"
                )
    if errors:
        raise InvalidInput(errors, what="policy")


def policy_revision_create(
    *, tenant: Tenant, body: Any, user: AbstractBaseUser | None, policy_id: str | None = None,
    source_text: str = "",
) -> PolicyRevision:
    """A new draft revision; its number comes from the body and must be new for the policy.
    `source_text` is the YAML the body was read from (kept for the editor), if any."""
    policy = policy_parse(body, policy_id=policy_id)
    policy_upgrade_addresses_check(tenant=tenant, policy=policy)
    with transaction.atomic():
        container, _ = Policy.objects.get_or_create(tenant=tenant, policy_id=policy.policy.id)
        number = policy.policy.revision
        if PolicyRevision.objects.filter(policy=container, revision=number).exists():
            raise Conflict(f"policy.revision: revision {number} of policy {policy.policy.id!r} already exists")
        try:
            with transaction.atomic():
                created = PolicyRevision.objects.create(
                    policy=container,
                    revision=number,
                    body=policy_body(policy),
                    digest=policy_digest(policy),
                    source_text=source_text,
                    created_by=user,
                )
                revision_event(action=AuditAction.REVISION_CREATED, revision=created, user=user)
                return created
        except IntegrityError:
            raise Conflict(
                f"policy.revision: revision {number} of policy {policy.policy.id!r} already exists"
            ) from None


def policy_revision_update(
    *, revision: PolicyRevision, body: Any, user: AbstractBaseUser | None, source_text: str = ""
) -> PolicyRevision:
    """Replace a draft's body (same policy id and revision number). Published: Conflict.

    `source_text` is the text the body was read from (the editor posts its YAML); a body sent as
    JSON has none, and the stored text is dropped rather than left to contradict the body."""
    if revision.status != RevisionStatus.DRAFT:
        raise Conflict(f"policy {revision.policy.policy_id} revision {revision.revision} is {revision.status}; "
                       "create a new revision instead")
    policy = policy_parse(body, policy_id=revision.policy.policy_id, revision=revision.revision)
    policy_upgrade_addresses_check(tenant=revision.policy.tenant, policy=policy)
    previous = revision.digest
    with transaction.atomic():
        revision.body = policy_body(policy)
        revision.digest = policy_digest(policy)
        revision.source_text = source_text
        revision.save()
        if revision.digest != previous:
            revision_event(action=AuditAction.REVISION_EDITED, revision=revision, user=user,
                           note=f"digest was {previous}")
    return revision


def policy_revision_publish(*, revision: PolicyRevision, user: AbstractBaseUser | None, note: str = "") -> PolicyRevision:
    """Publish a draft and retire the policy's previously published revision, atomically.

    Refused (ServiceError, 400, one `path: message` per mechanism) when the draft adds a mechanism
    over the published revision without an `upgrades` entry naming it (ctxeng.engine.upgrades)."""
    with transaction.atomic():
        # Lock the policy row so two concurrent publishes serialize; the partial unique
        # constraint is the backstop.
        Policy.objects.select_for_update().filter(pk=revision.policy_id).first()
        revision = PolicyRevision.objects.select_related("policy").get(pk=revision.pk)
        if revision.status != RevisionStatus.DRAFT:
            raise Conflict(
                f"policy {revision.policy.policy_id} revision {revision.revision} is {revision.status}; "
                "only a draft can be published"
            )
        # Seed §8: each mechanism added over the revision this one replaces needs its record, and
        # the assemblies a record names must (still) be this tenant's.
        policy = parse_policy(revision.body)
        missing = upgrade_records_missing(revision=revision, policy=policy)
        if missing:
            raise ServiceError(*missing)
        policy_upgrade_addresses_check(tenant=revision.policy.tenant, policy=policy)
        now = timezone.now()
        for previous in PolicyRevision.objects.filter(policy_id=revision.policy_id, status=RevisionStatus.PUBLISHED):
            previous.status = RevisionStatus.RETIRED
            previous.retired_at = now
            previous.save()
            revision_event(action=AuditAction.REVISION_RETIRED, revision=previous, user=user,
                           note=f"replaced by revision {revision.revision}")
        revision.status = RevisionStatus.PUBLISHED
        revision.published_by = user
        revision.published_at = now
        revision.publish_note = note
        revision.save()
        revision_event(action=AuditAction.REVISION_PUBLISHED, revision=revision, user=user, note=note)
        return revision


def policy_import(*, tenant: Tenant, text: str | bytes, user: AbstractBaseUser | None, publish: bool, note: str = "") -> PolicyRevision:
    """Import a policy file (YAML or JSON) idempotently: an identical existing revision is reused."""
    policy = policy_parse(text)
    source_text = text.decode() if isinstance(text, bytes) else text
    existing = PolicyRevision.objects.filter(
        policy__tenant=tenant, policy__policy_id=policy.policy.id, revision=policy.policy.revision
    ).first()
    if existing is None:
        existing = policy_revision_create(tenant=tenant, body=policy.model_dump(mode="json"), user=user,
                                          source_text=source_text)
    elif existing.digest != policy_digest(policy):
        if existing.status != RevisionStatus.DRAFT:
            raise Conflict(
                f"policy {policy.policy.id} revision {policy.policy.revision} is {existing.status} with another "
                "body; bump policy.revision"
            )
        existing = policy_revision_update(revision=existing, body=policy.model_dump(mode="json"), user=user,
                                          source_text=source_text)
    if publish and existing.status == RevisionStatus.DRAFT:
        existing = policy_revision_publish(revision=existing, user=user, note=note)
    return existing


# --------------------------------------------------------------------------- impact preview


def impact_preview_start(
    *, revision: PolicyRevision, user: AbstractBaseUser | None, draft: ContextPolicy | None = None,
    selection: dict[str, Any] | None = None,
) -> ImpactPreview:
    """A new preview of `revision`, run after commit; earlier unfinished previews of it are canceled.

    `draft` is an unsaved body (the editor's current text, parsed): the preview replays it instead
    of the saved one and keeps it, so its result says which body it describes. `selection` says
    which recorded requests to replay (policies.dashboard_selectors.impact_selection, validated)."""
    with transaction.atomic():
        for earlier in ImpactPreview.objects.filter(revision=revision, status__in=ACTIVE_PREVIEW_STATUSES):
            impact_preview_cancel(preview=earlier)
        if draft is None:
            preview = ImpactPreview.objects.create(revision=revision, digest=revision.digest, requested_by=user,
                                                   selection=selection or {})
        else:
            preview = ImpactPreview.objects.create(revision=revision, digest=policy_digest(draft),
                                                   body=policy_body(draft), requested_by=user, selection=selection or {})
        transaction.on_commit(lambda: impact_preview_enqueue(preview_id=preview.id))
    return preview


# Without REDIS_URL a preview runs in this process, on a thread of its own: the request that
# started it answers at once, and the page polls its progress like a Celery-run one's.
_inline_runner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="impact-preview")


def _run_inline(preview_id: str) -> None:
    from .tasks import run_impact_preview

    try:
        run_impact_preview(preview_id)
    except Exception:  # noqa: BLE001 - a thread's exception would be lost in its future
        logger.exception("impact preview %s failed in process", preview_id)
    finally:
        connection.close()  # the thread's own connection, not left open for the next preview


def impact_preview_enqueue(*, preview_id: uuid.UUID) -> None:
    """In-process when REDIS_URL is unset (on the preview thread), else Celery, in its tenant's
    fair queue (ctxeng.server.fair_queue). Never raises: a preview that could not be sent stays
    queued, and the editor can cancel it and run another.

    The thread has its own database connection, which only sees committed rows: called inside a
    transaction still open (a test's, which wraps everything), the preview runs in the caller's
    thread instead, since no other connection could see it yet."""
    from ctxeng.server import fair_queue

    from .tasks import run_impact_preview

    try:
        if settings.CTXENG_JOBS_INLINE and connection.in_atomic_block:
            run_impact_preview(str(preview_id))
        elif settings.CTXENG_JOBS_INLINE:
            _inline_runner.submit(_run_inline, str(preview_id))
        else:
            if fair_queue.enabled():
                tenant_id = (ImpactPreview.objects.filter(id=preview_id)
                             .values_list("revision__policy__tenant_id", flat=True).get())
                fair_queue.push(kind="preview", item_id=str(preview_id), tenant_id=tenant_id)
            run_impact_preview.apply_async(args=[str(preview_id)])
    except Exception:  # noqa: BLE001 - see docstring
        logger.exception("could not hand impact preview %s to the runner", preview_id)


def impact_preview_orphan_after() -> timedelta:
    """How long a preview may stay `running`: no runner outlives it. The loop starts no replay after
    CTXENG_IMPACT_TIME_LIMIT_SECONDS, and Celery kills the task at CTXENG_TURN_TIME_LIMIT (which is
    larger); a minute more covers a clock step between the web tier and the runner."""
    return timedelta(seconds=settings.CTXENG_TURN_TIME_LIMIT + 60)


def impact_preview_reap(*, preview: ImpactPreview) -> ImpactPreview:
    """A preview still `running` past `impact_preview_orphan_after` lost its runner (the process
    running it stopped: a reload, a recycled or killed worker) and would never end; it ends `failed`
    saying so, and the editor can run it again. The runner's own updates filter on `running`, so a
    runner that was only slow changes nothing after this."""
    cutoff = timezone.now() - impact_preview_orphan_after()
    if ImpactPreview.objects.filter(id=preview.id, status=PreviewStatus.RUNNING, started_at__lt=cutoff).update(
        status=PreviewStatus.FAILED, finished_at=timezone.now(),
        error="interrupted: the process running it stopped before it finished "
              f"(no runner takes longer than {impact_preview_orphan_after().total_seconds():g} s); run it again",
    ):
        preview.refresh_from_db()
    return preview


def impact_preview_cancel(*, preview: ImpactPreview) -> ImpactPreview:
    """A queued preview ends `canceled` now; a running one is asked to stop before its next replay
    (one whose runner is gone ends `failed`, `impact_preview_reap`)."""
    impact_preview_reap(preview=preview)
    now = timezone.now()
    if not ImpactPreview.objects.filter(id=preview.id, status=PreviewStatus.QUEUED).update(
        status=PreviewStatus.CANCELED, stopped_reason="canceled before it started", finished_at=now
    ):
        ImpactPreview.objects.filter(id=preview.id, status=PreviewStatus.RUNNING).update(cancel_requested=True)
    preview.refresh_from_db()
    return preview


ROWS_SAVED_EVERY_SECONDS = 1.0


def impact_preview_run(*, preview_id: str | uuid.UUID) -> None:
    """Claim a queued preview and replay the policy's recent requests under the revision's body."""
    from .dashboard_selectors import addressed_jobs, addressed_row, impact_row, recent_jobs_for_policy

    claimed = ImpactPreview.objects.filter(id=preview_id, status=PreviewStatus.QUEUED).update(
        status=PreviewStatus.RUNNING, started_at=timezone.now()
    )
    if not claimed:
        return
    preview = ImpactPreview.objects.select_related("revision__policy__tenant").get(id=preview_id)
    running = ImpactPreview.objects.filter(id=preview_id, status=PreviewStatus.RUNNING)
    try:
        if preview.body is not None:
            draft = parse_policy(preview.body)
        elif preview.revision.digest != preview.digest:
            raise InvalidInput(["the revision changed after the preview was requested; run it again"], what="preview")
        else:
            draft = parse_policy(preview.revision.body)
        # The assemblies the draft's upgrade records address go first (seed §8: did it solve them?).
        addressed = addressed_jobs(preview.revision.policy, draft)
        seen = {job.id for _, _, job in addressed if job is not None}
        replays = [lambda a=a, names=names, job=job: addressed_row(a, names, job, draft) for a, names, job in addressed]
        replays += [lambda job=job: impact_row(job, draft) for job in recent_jobs_for_policy(preview.revision.policy, preview.selection) if job.id not in seen]
        running.update(total=len(replays))
        limit = settings.CTXENG_IMPACT_TIME_LIMIT_SECONDS
        deadline = time.monotonic() + limit
        rows: list[dict[str, Any]] = []
        stopped = ""
        saved = time.monotonic()
        for replay in replays:
            if ImpactPreview.objects.filter(id=preview_id, cancel_requested=True).exists():
                stopped = "canceled"
                break
            if rows and time.monotonic() > deadline:
                stopped = f"stopped at the time limit of {limit:g} s (CTXENG_IMPACT_TIME_LIMIT_SECONDS)"
                break
            rows.append(replay())
            # The count after each replay; the rows so far at most once a second (rewriting them
            # all after each of 200 replays wrote ~100 MB for a 1 MB result).
            if time.monotonic() - saved >= ROWS_SAVED_EVERY_SECONDS:
                running.update(done=len(rows), rows=rows)
                saved = time.monotonic()
            else:
                running.update(done=len(rows))
        running.update(
            status=PreviewStatus.CANCELED if stopped == "canceled" else PreviewStatus.DONE,
            stopped_reason=stopped, finished_at=timezone.now(), done=len(rows), rows=rows,
        )
    except Exception as exc:  # noqa: BLE001 - the preview ends failed with the error, never stays running
        logger.exception("impact preview %s failed", preview_id)
        running.update(status=PreviewStatus.FAILED, error=f"{type(exc).__name__}: {exc}"[:2000],
                       finished_at=timezone.now())
