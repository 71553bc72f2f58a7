"""Writes for assembly jobs, manifests, artifacts, usage and tenancy.

The job lifecycle (netbox-style, the job row is the source of truth):

    assembly_job_submit   validate, resolve the policy revision, save the row (queued),
                          enqueue on commit
    assembly_job_claim    guarded `queued -> running` (a second delivery claims nothing)
    assembly_job_assemble run the engine, then seal manifest + item rows in one transaction,
                          guarded on the claim so a stale attempt can never write a manifest
    assembly_jobs_recover requeue jobs whose worker died (stale heartbeat); fail them after
                          CTXENG_MAX_ATTEMPTS

Every path ends a job `ready | blocked | failed`; an engine exception is recorded as `failed`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone
from rest_framework.authtoken.models import Token

from ctxeng.engine import AssemblyRequest, InvalidInput, assemble, parse_policy, parse_request
from ctxeng.engine.adapters import get_adapter
from ctxeng.engine.hashing import sha256_json, sha256_text
from ctxeng.errors import Conflict, Forbidden
from policies.models import PolicyRevision
from policies.selectors import revision_for_assembly

from .models import (
    Artifact,
    AssemblyJob,
    Decision,
    JobStatus,
    Manifest,
    ManifestItem,
    Membership,
    Role,
    Run,
    Tenant,
    UsageReport,
)
from .selectors import artifact_for_ref, roles_in, tenants_for

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------- tenancy


def tenant_member_add(*, username: str, tenant_slug: str, roles: list[str], password: str | None = None) -> Token:
    """Create the user, tenant and memberships as needed; return the user's API token."""
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
        token, _ = Token.objects.get_or_create(user=user)
    return token


# --------------------------------------------------------------------------- submit


def _request_digest(data: dict[str, Any]) -> str:
    return sha256_json(data)


def assembly_job_submit(
    *, user: AbstractBaseUser, data: Any, idempotency_key: str | None = None
) -> tuple[AssemblyJob, bool]:
    """Validate and save a job, enqueue it on commit. Returns (job, created).

    Same idempotency key and same body: the existing job, created=False. Same key, other body:
    Conflict. The request names a tenant (principal.tenant) the user must hold `agent` in.
    """
    request = parse_request(data)
    tenant = tenants_for(user).filter(slug=request.principal.tenant).first()
    if tenant is None:
        raise Forbidden(f"principal.tenant: you are not a member of tenant {request.principal.tenant!r}")
    if Role.AGENT not in roles_in(user, tenant):
        raise Forbidden(f"principal.tenant: the agent role is required in tenant {tenant.slug!r}")
    revision = revision_for_assembly(tenant=tenant, policy_id=request.policy.id, revision=request.policy.revision)
    if request.adapter is not None and get_adapter(request.adapter) is None:
        raise InvalidInput([f"adapter: unknown adapter {request.adapter!r}"], what="request")
    if request.policy.digest is not None and request.policy.digest != revision.digest:
        raise InvalidInput(
            [f"policy.digest: {request.policy.digest} does not match {revision.policy.policy_id} revision "
             f"{revision.revision} ({revision.digest})"],
            what="request",
        )
    digest = _request_digest(data)
    key = idempotency_key or None
    if key is not None:
        existing = _idempotent_match(tenant=tenant, key=key, digest=digest)
        if existing is not None:
            return existing, False
    try:
        with transaction.atomic():
            run, _ = Run.objects.get_or_create(tenant=tenant, run_id=request.run_id)
            job = AssemblyJob.objects.create(
                tenant=tenant,
                run=run,
                step_id=request.step_id,
                request=data,
                request_digest=digest,
                idempotency_key=key,
                policy_revision=revision,
                submitted_by=user,
                enqueued_at=timezone.now(),
            )
            transaction.on_commit(lambda: assembly_job_enqueue(job_id=job.id))
    except IntegrityError:
        # A concurrent submit with the same key won the race.
        existing = _idempotent_match(tenant=tenant, key=key, digest=digest) if key else None
        if existing is None:
            raise
        return existing, False
    return job, True


def _idempotent_match(*, tenant: Tenant, key: str, digest: str) -> AssemblyJob | None:
    existing = AssemblyJob.objects.filter(tenant=tenant, idempotency_key=key).first()
    if existing is not None and existing.request_digest != digest:
        raise Conflict(f"Idempotency-Key {key!r} was used for another request body (assembly {existing.id})")
    return existing


def assembly_job_enqueue(*, job_id: uuid.UUID) -> None:
    """Hand a saved job to the runner: in-process when REDIS_URL is unset, else Celery.

    Never raises: the job row is already committed, so a broker outage must not turn the submit
    into an error. A job whose message was not sent stays `queued` and the stale-job sweep
    re-sends it after CTXENG_REQUEUE_QUEUED_AFTER_SECONDS.
    """
    from .tasks import run_assembly_job

    try:
        if settings.CTXENG_JOBS_INLINE:
            run_assembly_job(str(job_id))
        else:
            run_assembly_job.apply_async(args=[str(job_id)])
    except Exception:  # noqa: BLE001 - see docstring
        logger.exception("could not hand job %s to the runner; the sweep will re-send it", job_id)


# --------------------------------------------------------------------------- run


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def assembly_job_claim(*, job_id: str | uuid.UUID) -> int | None:
    """Claim a queued job (guarded update); the attempt number, or None if not claimable."""
    now = timezone.now()
    claimed = AssemblyJob.objects.filter(
        id=job_id, status=JobStatus.QUEUED, attempts__lt=settings.CTXENG_MAX_ATTEMPTS
    ).update(
        status=JobStatus.RUNNING,
        attempts=F("attempts") + 1,
        claimed_at=now,
        heartbeat_at=now,
        claimed_by=_worker_name(),
        updated_at=now,
    )
    if not claimed:
        return None
    return AssemblyJob.objects.filter(id=job_id).values_list("attempts", flat=True).first()


@contextlib.contextmanager
def assembly_job_heartbeat(*, job_id: str | uuid.UUID, attempt: int) -> Iterator[None]:
    """Refresh heartbeat_at every CTXENG_HEARTBEAT_SECONDS while the body runs (a live claim)."""
    stop = threading.Event()

    def beat() -> None:
        try:
            while not stop.wait(settings.CTXENG_HEARTBEAT_SECONDS):
                try:
                    AssemblyJob.objects.filter(id=job_id, status=JobStatus.RUNNING, attempts=attempt).update(
                        heartbeat_at=timezone.now()
                    )
                except Exception:  # noqa: BLE001 - a missed beat must not kill the job
                    logger.warning("heartbeat for job %s failed", job_id, exc_info=True)
        finally:
            connection.close()

    thread = threading.Thread(target=beat, name=f"heartbeat-{job_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def _resolved_request(job: AssemblyJob) -> AssemblyRequest:
    """The stored request with its policy revision pinned and artifact_refs loaded (same tenant)."""
    request = parse_request(job.request)
    revision: PolicyRevision = job.policy_revision
    request = request.model_copy(update={"policy": request.policy.model_copy(update={"revision": revision.revision})})
    candidates = []
    changed = False
    for item in request.candidates:
        if item.artifact_ref is not None and item.content is None:
            artifact = artifact_for_ref(
                tenant=job.tenant, artifact_id=item.artifact_ref.artifact_id, revision=item.artifact_ref.revision
            )
            # Not found: leave content empty; the engine's structural_integrity gate rejects it.
            if artifact is not None:
                item = item.model_copy(update={"content": artifact.content})
                changed = True
        candidates.append(item)
    if changed:
        request = request.model_copy(update={"candidates": candidates})
    return request


def assembly_job_assemble(*, job_id: str | uuid.UUID, attempt: int) -> str:
    """Run the engine for a claimed job and seal the result; returns the job's final status."""
    job = AssemblyJob.objects.select_related("policy_revision__policy", "tenant", "run").get(id=job_id)
    try:
        request = _resolved_request(job)
        policy = parse_policy(job.policy_revision.body)
        result = assemble(request, policy)
    except InvalidInput as exc:
        return _fail(job_id=job.id, attempt=attempt, error=str(exc))
    except Exception as exc:  # noqa: BLE001 - any engine failure ends the job `failed`, recorded
        logger.exception("assembly job %s failed", job.id)
        return _fail(job_id=job.id, attempt=attempt, error=f"{type(exc).__name__}: {exc}")
    return _seal(job=job, attempt=attempt, result=result)


def _fail(*, job_id: uuid.UUID, attempt: int, error: str) -> str:
    now = timezone.now()
    AssemblyJob.objects.filter(id=job_id, status=JobStatus.RUNNING, attempts=attempt).update(
        status=JobStatus.FAILED, error=error[:10_000], finished_at=now, updated_at=now
    )
    return JobStatus.FAILED


def _seal(*, job: AssemblyJob, attempt: int, result: Any) -> str:
    manifest = result.manifest
    document = result.manifest_dict()
    status = result.status
    now = timezone.now()
    with transaction.atomic():
        won = AssemblyJob.objects.filter(id=job.id, status=JobStatus.RUNNING, attempts=attempt).update(
            status=status, finished_at=now, heartbeat_at=now, updated_at=now, error=""
        )
        if not won:
            # This attempt lost its claim (requeued as stale): the attempt that holds it seals.
            logger.warning("job %s attempt %s lost its claim; result discarded", job.id, attempt)
            return AssemblyJob.objects.filter(id=job.id).values_list("status", flat=True).first()
        sealed = Manifest.objects.create(
            job=job,
            assembly_id=manifest.assembly.id,
            status=status,
            document=document,
            provider_input=result.serialized_input,
            assembly_input_hash=manifest.assembly.assembly_input_hash or "",
            serialized_model_input_hash=manifest.assembly.serialized_model_input_hash or "",
            estimated_input_tokens=manifest.budget.estimated_used,
        )
        ManifestItem.objects.bulk_create(_item_rows(sealed, manifest), batch_size=500)
    return status


def _item_rows(sealed: Manifest, manifest: Any) -> list[ManifestItem]:
    rows = [
        ManifestItem(
            manifest=sealed,
            item_id=item.item_id,
            decision=Decision.INCLUDED,
            reason=item.admission_reason,
            partition=item.partition,
            tokens=item.tokens,
            trust=str(item.trust),
            role=str(item.intended_role),
            kind=item.kind,
            source_type=item.source_type,
            source_ref=item.source_ref,
        )
        for item in manifest.included
    ]
    rows += [
        ManifestItem(
            manifest=sealed,
            item_id=item.item_id,
            decision=Decision.EXCLUDED,
            reason=str(item.reason),
            hard_gate=str(item.hard_gate) if item.hard_gate is not None else "",
            detail=item.detail,
            partition=item.partition or "",
            tokens=item.tokens,
            trust=str(item.trust) if item.trust is not None else "",
            role=str(item.intended_role),
            kind=item.kind,
            source_type=item.source_type,
            source_ref=item.source_ref,
        )
        for item in manifest.excluded
    ]
    return rows


# --------------------------------------------------------------------------- recovery


def assembly_jobs_recover() -> dict[str, int]:
    """Requeue jobs whose worker died, fail those out of attempts, re-send forgotten queued jobs.

    Safe to run concurrently from every worker: each change is a guarded update, and only the
    sweeper whose update matched enqueues.
    """
    now = timezone.now()
    stale_before = now - timedelta(seconds=settings.CTXENG_STALE_AFTER_SECONDS)
    counts = {"requeued": 0, "failed": 0, "resent": 0}
    stale = AssemblyJob.objects.filter(status=JobStatus.RUNNING, heartbeat_at__lt=stale_before)
    for job_id, attempts, heartbeat in stale.values_list("id", "attempts", "heartbeat_at"):
        guard = AssemblyJob.objects.filter(id=job_id, status=JobStatus.RUNNING, attempts=attempts, heartbeat_at=heartbeat)
        if attempts >= settings.CTXENG_MAX_ATTEMPTS:
            if guard.update(
                status=JobStatus.FAILED,
                finished_at=now,
                updated_at=now,
                error=f"worker lost during each of {attempts} attempts (CTXENG_MAX_ATTEMPTS={settings.CTXENG_MAX_ATTEMPTS})",
            ):
                counts["failed"] += 1
        elif guard.update(
            status=JobStatus.QUEUED,
            enqueued_at=now,
            updated_at=now,
            error=f"attempt {attempts}: worker lost (no heartbeat since {heartbeat.isoformat()}); requeued",
        ):
            counts["requeued"] += 1
            assembly_job_enqueue(job_id=job_id)
    forgotten_before = now - timedelta(seconds=settings.CTXENG_REQUEUE_QUEUED_AFTER_SECONDS)
    forgotten = AssemblyJob.objects.filter(status=JobStatus.QUEUED, enqueued_at__lt=forgotten_before)
    for job_id, enqueued_at in forgotten.values_list("id", "enqueued_at"):
        if AssemblyJob.objects.filter(id=job_id, status=JobStatus.QUEUED, enqueued_at=enqueued_at).update(
            enqueued_at=now
        ):
            counts["resent"] += 1
            assembly_job_enqueue(job_id=job_id)
    if any(counts.values()):
        logger.info("job recovery: %s", counts)
    return counts


# --------------------------------------------------------------------------- artifacts and usage


def artifact_create(
    *,
    user: AbstractBaseUser | None,
    tenant: Tenant,
    artifact_id: str,
    revision: int | str,
    kind: str,
    content: str,
    writer: str,
    scope: str,
    content_hash: str | None = None,
) -> tuple[Artifact, bool]:
    """Store an artifact revision; re-posting the same content is a no-op, other content: Conflict."""
    actual = sha256_text(content)
    if content_hash is not None and content_hash != actual:
        raise InvalidInput([f"content_hash: {content_hash} does not match the content ({actual})"], what="artifact")
    existing = Artifact.objects.filter(tenant=tenant, artifact_id=artifact_id, revision=str(revision)).first()
    if existing is not None:
        if existing.content_hash != actual:
            raise Conflict(f"artifact {artifact_id} revision {revision} exists with other content; write a new revision")
        return existing, False
    try:
        with transaction.atomic():
            return Artifact.objects.create(
                tenant=tenant,
                artifact_id=artifact_id,
                revision=str(revision),
                kind=kind,
                content=content,
                content_hash=actual,
                writer=writer,
                scope=scope,
                created_by=user,
            ), True
    except IntegrityError:
        raise Conflict(f"artifact {artifact_id} revision {revision} was written concurrently") from None


def usage_report_record(
    *, manifest: Manifest, user: AbstractBaseUser | None, input_tokens: int, cached_tokens: int, output_tokens: int
) -> UsageReport:
    """Record (or replace) the provider's reported usage beside the estimate; the manifest is untouched."""
    report, _ = UsageReport.objects.update_or_create(
        manifest=manifest,
        defaults={
            "input_tokens": input_tokens,
            "cached_tokens": cached_tokens,
            "output_tokens": output_tokens,
            "estimated_input_tokens": manifest.estimated_input_tokens,
            "reported_by": user,
        },
    )
    return report
