"""Writes for assembly jobs, manifests, artifacts and usage (tenancy: ctxeng.accounts.services).

The job lifecycle (netbox-style, the job row is the source of truth):

    assembly_job_submit   validate, resolve the policy revision, save the row (queued),
                          enqueue on commit
    assembly_job_claim    guarded `queued -> running` (a second delivery claims nothing)
    assembly_job_assemble run the engine, then seal manifest + item rows in one transaction,
                          guarded on the claim so a stale attempt can never write a manifest
    assembly_jobs_recover requeue jobs whose worker died (stale heartbeat); fail them after
                          CTXENG_MAX_ATTEMPTS

Every path ends a job `ready | blocked | failed`. Failures are typed (`assembly_job_assemble`):
a deterministic error ends the job `failed` at once with the error; only an infrastructure fault
(the database unreachable) leaves it to the stale-job sweep, which retries it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, InterfaceError, OperationalError, connection, models, transaction
from django.db.models import F
from django.utils import timezone

from ctxeng import telemetry
from ctxeng.accounts.models import Role, Tenant
from ctxeng.accounts.selectors import roles_in, tenants_for
from ctxeng.content.packing import Packer, pack_document
from ctxeng.content.store import content_read, content_save, settle, write_epoch
from ctxeng.engine import (
    ContextPolicy,
    InvalidInput,
    assemble,
    compatibility_errors,
    parse_policy,
    parse_request,
)
from ctxeng.engine.adapters import get_adapter
from ctxeng.engine.budget import reserves_exceed_context
from ctxeng.engine.hashing import sha256_json, sha256_text
from ctxeng.server.errors import BadReference, Conflict, Forbidden, NotFound, OutcomeUnknown
from policies.models import PolicyRevision
from policies.selectors import revision_for_assembly

from . import quotas
from .dashboard_selectors import page_sections, reason_rank
from .item_labels import request_labels
from .models import (
    Artifact,
    AssemblyJob,
    Decision,
    ItemDecision,
    JobStatus,
    Manifest,
    ManifestItem,
    Origin,
    Run,
    UsageReport,
    Verification,
)
from .selectors import job_request, model_calibration, previous_step_cache, request_as_assembled

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------- runs


def run_close(*, user: AbstractBaseUser, tenant: Tenant, run_id: str) -> Run:
    """Close a run, and with it its task: later steps of the run assemble with a task_closed event
    (their resident parts expire, so they are blocked, with the reason in the manifest). Idempotent."""
    from ctxeng.audit.models import AuditAction
    from ctxeng.audit.services import audit_record

    with transaction.atomic():
        run = Run.objects.select_for_update().filter(tenant=tenant, run_id=run_id).first()
        if run is None:
            raise NotFound(f"run_id: no run {run_id!r} in tenant {tenant.slug!r}")
        if run.closed_at is None:
            run.closed_at = timezone.now()
            run.save(update_fields=["closed_at"])
            audit_record(action=AuditAction.RUN_CLOSED, user=user, tenant=tenant, subject=run_id[:200])
    return run


# --------------------------------------------------------------------------- submit


def _request_digest(data: dict[str, Any]) -> str:
    return sha256_json(data)


def assembly_job_submit(
    *, user: AbstractBaseUser, data: Any, idempotency_key: str | None = None, traceparent: str | None = None
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
    policy = _parsed_policy(revision.pk, revision.digest)
    errors = compatibility_errors(request.pinned_to(revision.revision), policy)
    # The manifest row stores the usable input as a count (never below 0): a model smaller than
    # the policy's reserves would be a job that fails when sealed.
    shortfall = reserves_exceed_context(policy, request.model.context_limit)
    errors += [shortfall] if shortfall else []
    if errors:  # what the policy refuses is a 400 now, never a job that fails later
        raise InvalidInput(errors, what="request")
    digest = _request_digest(data)
    key = idempotency_key or None
    if key is not None:
        existing = _idempotent_match(tenant=tenant, key=key, digest=digest)
        if existing is not None:
            return existing, False
    # Packed before the transaction, which then holds the write lock (SQLite) for the writes alone.
    skeleton, packer = pack_document(data)
    job = None
    try:
        with transaction.atomic():
            run = _store_and_claim_run(tenant=tenant, packer=packer, run_id=request.run_id)
            job = AssemblyJob.objects.create(
                tenant=tenant,
                run=run,
                step_id=request.step_id,
                request_packed=skeleton,
                request_digest=digest,
                idempotency_key=key,
                policy_revision=revision,
                submitted_by=user,
                enqueued_at=timezone.now(),
                traceparent=traceparent or "",
            )
            transaction.on_commit(lambda: assembly_job_enqueue(job_id=job.id, traceparent=traceparent, tenant_id=tenant.pk))
    except IntegrityError:
        # A concurrent submit with the same key won the race.
        existing = _idempotent_match(tenant=tenant, key=key, digest=digest) if key else None
        if existing is None:
            raise
        return existing, False
    except (OperationalError, InterfaceError):
        if job is None:
            raise  # before the job row: the transaction rolled back, nothing was applied (503)
        _committed_despite_error(job=job, traceparent=traceparent)
    return job, True


def _committed_despite_error(*, job: AssemblyJob, traceparent: str | None) -> None:
    """The connection broke in the commit of `job`'s transaction: the database may have applied it
    before the break. Asked on a new connection: applied, the job is enqueued here (its on-commit
    hook never ran) and the submit succeeds; not applied, the error stands (503, not applied);
    no answer, OutcomeUnknown (504, never a 503, whose retry without a key would duplicate the job)."""
    connection.close()
    try:
        applied = AssemblyJob.objects.filter(id=job.id).exists()
    except (OperationalError, InterfaceError):
        raise OutcomeUnknown(
            f"the database connection broke while assembly {job.id} was committed and the database cannot be "
            "asked whether it was: the job may have been saved; retry with the same Idempotency-Key (it "
            "returns the job if it was)", retry_after=settings.CTXENG_OUTAGE_RETRY_AFTER_SECONDS) from None
    if not applied:
        raise
    assembly_job_enqueue(job_id=job.id, traceparent=traceparent, tenant_id=job.tenant_id)


def _idempotent_match(*, tenant: Tenant, key: str, digest: str) -> AssemblyJob | None:
    existing = AssemblyJob.objects.filter(tenant=tenant, idempotency_key=key).first()
    if existing is not None and existing.request_digest != digest:
        raise Conflict(f"Idempotency-Key {key!r} was used for another request body (assembly {existing.id})")
    return existing


def assembly_job_enqueue(*, job_id: uuid.UUID, traceparent: str | None = None, tenant_id: int | None = None) -> None:
    """Hand a saved job to the runner: in-process when REDIS_URL is unset, else Celery, in its
    tenant's fair queue (ctxeng.server.fair_queue; `tenant_id` read from the row when not given).

    Never raises: the job row is already committed, so a broker outage must not turn the submit
    into an error. A job whose message was not sent stays `queued` and the stale-job sweep
    re-sends it after CTXENG_REQUEUE_QUEUED_AFTER_SECONDS. A W3C `traceparent` travels with the
    task (a re-sent job starts its own trace).
    """
    from ctxeng.server import fair_queue

    from .tasks import run_assembly_job

    try:
        if settings.CTXENG_JOBS_INLINE:
            run_assembly_job(str(job_id), traceparent=traceparent)
        else:
            if fair_queue.enabled():
                if tenant_id is None:
                    tenant_id = AssemblyJob.objects.filter(id=job_id).values_list("tenant_id", flat=True).get()
                fair_queue.push(kind="assembly", item_id=str(job_id), tenant_id=tenant_id)
            run_assembly_job.apply_async(args=[str(job_id)], kwargs={"traceparent": traceparent} if traceparent else {})
    except Exception:  # noqa: BLE001 - see docstring
        logger.exception("could not hand job %s to the runner; the sweep will re-send it", job_id)


# --------------------------------------------------------------------------- recorded steps


@dataclass
class RecordedOutcome:
    """What became of one recorded step: `stored` (a new job), `duplicate` (its key was stored
    before, with the same body) or `refused` (`status` and `errors` say why; never stored)."""

    key: str
    outcome: str
    status: int
    job: AssemblyJob | None = None
    errors: list[str] | None = None


def recorded_steps_store(*, user: AbstractBaseUser, steps: list[dict[str, Any]],
                         dropped: list[dict[str, Any]] = ()) -> list[RecordedOutcome]:
    """Store steps an agent assembled in its own process (sdk.Recorder), each as a job of its run
    with `origin: recorded`, final at once, its manifest sealed as the agent sent it, and
    `verification: pending` until a worker re-assembles it (`recorded_step_verify`, enqueued on
    commit). Each step is its own transaction; one refused step refuses only itself.

    A step is refused (never stored) as a remote submit would be: a request the engine refuses, a
    tenant the user holds no `agent` role in, a policy or revision the tenant does not have
    published (403/400); and when its manifest is not a sealed manifest of that very request (run,
    step, policy, principal) or its key is not `<run_id>/<step_id>`. The same key with the same
    body is a duplicate (the first job); with another body, a Conflict (409). A quota refuses the
    whole batch (raised: the recorder keeps the steps and sends them again later).

    `dropped`: `{tenant, run_id, count}` totals of steps the recorder dropped at its bounds; each
    run keeps the largest total reported (a report sent twice counts once)."""
    outcomes = []
    for index, step in enumerate(steps):
        key = str(step.get("idempotency_key") or "")
        try:
            job, created = _recorded_step_store(user=user, step=step)
        except (InvalidInput, BadReference, Forbidden, Conflict) as exc:
            errors = exc.errors if isinstance(exc, InvalidInput) else [str(exc)]
            status = 400 if isinstance(exc, (InvalidInput, BadReference)) else exc.status_code
            outcomes.append(RecordedOutcome(key=key, outcome="refused", status=status,
                                            errors=[f"steps[{index}].{e}" for e in errors]))
            continue
        outcomes.append(RecordedOutcome(key=key, outcome="stored" if created else "duplicate",
                                        status=201 if created else 200, job=job))
    for row in dropped:
        _recorded_dropped_note(user=user, tenant_slug=row["tenant"], run_id=row["run_id"], count=row["count"])
    return outcomes


def _agent_tenant(user: AbstractBaseUser, slug: str) -> Tenant:
    tenant = tenants_for(user).filter(slug=slug).first()
    if tenant is None:
        raise Forbidden(f"principal.tenant: you are not a member of tenant {slug!r}")
    if Role.AGENT not in roles_in(user, tenant):
        raise Forbidden(f"principal.tenant: the agent role is required in tenant {tenant.slug!r}")
    return tenant


def _recorded_step_store(*, user: AbstractBaseUser, step: dict[str, Any]) -> tuple[AssemblyJob, bool]:
    from ctxeng.engine import ContextAssemblyManifest
    from ctxeng.engine.errors import validate

    data, document = step.get("request"), step.get("manifest")
    data = _with_referenced_content(user=user, data=data)
    try:
        request = parse_request(data)
    except InvalidInput as exc:
        raise InvalidInput([f"request.{e}" for e in exc.errors], what="request") from None
    try:
        validate(ContextAssemblyManifest, document, what="manifest")
    except InvalidInput as exc:
        raise InvalidInput([f"manifest.{e}" for e in exc.errors], what="manifest") from None
    if (document.get("cache") or {}).get("previous_cache_from") == "service":
        # The agent's engine compared with the previous_cache its own session kept: a claim.
        raise InvalidInput(["manifest.cache.previous_cache_from: a recorded step's cache figures compare with the "
                            "agent's own record of its previous step ('request'); 'service' is the service's jobs'"],
                           what="manifest")
    tenant = _agent_tenant(user, request.principal.tenant)
    if request.policy.revision is None:
        raise InvalidInput(["request.policy.revision: a recorded step names the revision it was assembled under"],
                           what="request")
    revision = revision_for_assembly(tenant=tenant, policy_id=request.policy.id, revision=request.policy.revision)
    assembly = document["assembly"]
    claims = {"run_id": request.run_id, "step_id": request.step_id,
              "policy.id": request.policy.id, "policy.revision": request.policy.revision,
              "principal": request.principal.model_dump(mode="json")}
    said = {"run_id": assembly["run_id"], "step_id": assembly["step_id"], "policy.id": assembly["policy"]["id"],
            "policy.revision": assembly["policy"]["revision"], "principal": assembly["principal"]}
    for name, value in claims.items():
        if said[name] != value:
            raise InvalidInput([f"manifest.assembly.{name}: {said[name]!r} is not the request's {value!r}"], what="manifest")
    key = f"{request.run_id}/{request.step_id}"
    if step.get("idempotency_key") != key:
        raise InvalidInput([f"idempotency_key: expected {key!r} (<run_id>/<step_id>)"], what="step")
    digest = sha256_json({"request": data, "manifest": document})
    existing = _idempotent_match(tenant=tenant, key=key, digest=digest)
    if existing is not None:
        return existing, False
    skeleton, packer = pack_document(data)
    prepared = _prepare_manifest(document, None, known=(item.content for item in request.candidates if item.content),
                                 labels=request_labels(data))
    now = timezone.now()
    try:
        with transaction.atomic():
            run = _store_and_claim_run(tenant=tenant, packer=packer, run_id=request.run_id)
            job = AssemblyJob.objects.create(
                tenant=tenant, run=run, step_id=request.step_id, request_packed=skeleton, request_digest=digest,
                idempotency_key=key, policy_revision=revision, submitted_by=user, status=assembly["status"],
                origin=Origin.RECORDED, verification=Verification.PENDING, enqueued_at=now, finished_at=now,
            )
            _write_manifest(job=job, prepared=prepared)
            transaction.on_commit(lambda: recorded_step_enqueue(job_id=job.id, tenant_id=tenant.pk))
    except IntegrityError:
        existing = _idempotent_match(tenant=tenant, key=key, digest=digest)
        if existing is None:
            raise
        return existing, False
    return job, True


CONTENT_REF = "content_ref"


def _with_referenced_content(*, user: AbstractBaseUser, data: Any) -> Any:
    """A recorded request whose candidates name their content by digest (`content_ref`, sent by
    sdk.Recorder for a long content the service acknowledged in an earlier step of the tenant)
    with that content put back from the tenant's content store, so everything after (the digest
    of the step, the stored request, the verification) sees the request as the agent assembled
    it. Only in a tenant the user may record in (checked first: no other tenant's store is read).
    A digest the tenant's store lacks (purged, or never stored) refuses the step, 409 naming the
    candidate: the recorder sends the step again with its content."""
    candidates = data.get("candidates") if isinstance(data, dict) else None
    if not isinstance(candidates, list):
        return data
    wanted = {i: c[CONTENT_REF] for i, c in enumerate(candidates) if isinstance(c, dict) and CONTENT_REF in c}
    if not wanted:
        return data
    for i, ref in wanted.items():
        if not isinstance(ref, str) or not ref.startswith("sha256:") or "content" in candidates[i]:
            raise InvalidInput([f"request.candidates[{i}].{CONTENT_REF}: a sha256 digest, instead of `content`"],
                               what="request")
    principal = data.get("principal")
    tenant = _agent_tenant(user, str(principal.get("tenant", "")) if isinstance(principal, dict) else "")
    from ctxeng.content.packing import decode, digest_of
    from ctxeng.content.store import content_fetch

    found = content_fetch(tenant_id=tenant.pk, digests=sorted(set(wanted.values())))
    resolved = list(candidates)
    for i, ref in wanted.items():
        body = found.get(ref)
        if body is None or digest_of(body) != ref:
            raise Conflict(f"request.candidates[{i}].{CONTENT_REF}: {ref} is not stored in tenant {tenant.slug!r} "
                           "(purged, or never sent): send the step with its content")
        text = decode(body)  # in the place of the reference: the request's key order is the agent's
        resolved[i] = {("content" if k == CONTENT_REF else k): (text if k == CONTENT_REF else v)
                       for k, v in candidates[i].items()}
    return {**data, "candidates": resolved}


def _store_and_claim_run(*, tenant: Any, packer: Any, run_id: str) -> Run:
    """Inside a submit's transaction (remote or recorded): the request's content stored, the tenant
    locked and held to its quotas (a new run counts), its run found or made."""
    added = content_save(tenant=tenant, packer=packer)
    quotas.lock_tenant(tenant)
    run = Run.objects.filter(tenant=tenant, run_id=run_id).first()
    quotas.check_submit(tenant=tenant, new_run=run is None)
    quotas.check_stored(tenant=tenant, added=added)
    if run is None:
        run, _ = Run.objects.get_or_create(tenant=tenant, run_id=run_id)
    return run


def _recorded_dropped_note(*, user: AbstractBaseUser, tenant_slug: str, run_id: str, count: int) -> None:
    """Raise the run's count of steps its recorder dropped to `count` (a total); a tenant the user
    may not record in is passed over (its steps are refused the same way)."""
    try:
        tenant = _agent_tenant(user, tenant_slug)
    except Forbidden:
        return
    run, _ = Run.objects.get_or_create(tenant=tenant, run_id=run_id)
    Run.objects.filter(pk=run.pk, recorded_dropped__lt=count).update(recorded_dropped=count)


def recorded_step_enqueue(*, job_id: uuid.UUID, tenant_id: int | None = None) -> None:
    """Hand a recorded step's verification to the runner, as `assembly_job_enqueue` hands a job:
    in-process without REDIS_URL, else a Celery task in its tenant's fair queue. Never raises: a
    verification whose message was lost stays `pending` and the sweep re-sends it."""
    from ctxeng.server import fair_queue

    from .tasks import verify_recorded_step

    try:
        if settings.CTXENG_JOBS_INLINE:
            verify_recorded_step(str(job_id))
        else:
            if fair_queue.enabled():
                if tenant_id is None:
                    tenant_id = AssemblyJob.objects.filter(id=job_id).values_list("tenant_id", flat=True).get()
                fair_queue.push(kind="verification", item_id=str(job_id), tenant_id=tenant_id)
            verify_recorded_step.apply_async(args=[str(job_id)])
    except Exception:  # noqa: BLE001 - see docstring
        logger.exception("could not hand the verification of %s to the runner; the sweep will re-send it", job_id)


def recorded_step_verify(*, job_id: str | uuid.UUID) -> str | None:
    """Re-assemble a recorded step under its policy revision and record what the comparison says
    (manifests.verification): `verified`, `diverged` with the first difference, or `unverifiable`
    naming what the service lacks. Idempotent: a step no longer pending is left as it is, and the
    write is guarded on `pending`, so a second delivery changes nothing."""
    job = (AssemblyJob.objects.select_related("policy_revision__policy", "tenant", "run", "manifest")
           .defer("policy_revision__body").filter(id=job_id, origin=Origin.RECORDED).first())
    if job is None or job.verification != Verification.PENDING:
        return None if job is None else job.verification
    try:
        outcome, detail = _verification_of(job)
    except INFRASTRUCTURE_FAULTS:
        raise  # left pending: the sweep re-sends it
    except Exception as exc:  # noqa: BLE001 - deterministic: the step cannot be re-assembled here
        logger.exception("verification of recorded step %s failed", job_id)
        outcome, detail = Verification.UNVERIFIABLE, f"the re-assembly failed: {type(exc).__name__}: {exc}"
    now = timezone.now()
    AssemblyJob.objects.filter(id=job.id, verification=Verification.PENDING).update(
        verification=outcome, verification_detail=detail[:10_000], verified_at=now, updated_at=now)
    return outcome


def _verification_of(job: AssemblyJob) -> tuple[str, str]:
    from .selectors import StoredArtifacts, artifact_lookup, manifest_document
    from .verification import agreement, first_difference

    revision = job.policy_revision
    manifest = job.manifest
    if manifest.content_purged_at is not None:
        return Verification.UNVERIFIABLE, "content: purged by retention before the step was verified"
    recorded = manifest_document(manifest)
    claimed = (recorded.get("assembly") or {}).get("policy") or {}
    label = f"{revision.policy.policy_id} revision {revision.revision}"
    if claimed.get("digest") != revision.digest:
        return Verification.UNVERIFIABLE, (
            f"policy: the service's {label} is {revision.digest}; the step was assembled under {claimed.get('digest')}, "
            "a body the service does not have")
    policy = _parsed_policy(revision.pk, revision.digest)
    request = parse_request(job_request(job)).pinned_to(revision.revision)
    stored = StoredArtifacts(job.tenant, request)
    for item in request.candidates:
        ref = item.artifact_ref
        if ref is not None and stored.row(ref.artifact_id, ref.revision) is None:
            return Verification.UNVERIFIABLE, (
                f"content: artifact {ref.artifact_id} revision {ref.revision} (item {item.item_id}) is not stored on the "
                "service (POST artifacts/ stores it)")
    created_at = (recorded.get("assembly") or {}).get("created_at")
    result = assemble(request, policy, artifacts=artifact_lookup(job.tenant, stored), created_at=created_at)
    again = result.manifest_dict()
    difference = first_difference(recorded, again)
    if difference is not None:
        return Verification.DIVERGED, difference
    return Verification.VERIFIED, agreement(again)


# --------------------------------------------------------------------------- run


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def assembly_job_claim(*, job_id: str | uuid.UUID) -> int | None:
    """Claim a queued job (guarded update); the attempt number, or None if not claimable.

    Every delivery of a job runs this, so it is one statement, UPDATE ... RETURNING, in plain SQL
    where the database has it (PostgreSQL, SQLite 3.35+): the ORM's building of an update and a
    read cost several times what they cost the database. Elsewhere the same update and a read."""
    now = timezone.now()
    claimed_by = _worker_name()
    if connection.features.can_return_columns_from_insert:
        return _claim_returning(job_id, now, claimed_by)
    claimed = AssemblyJob.objects.filter(
        id=job_id, status=JobStatus.QUEUED, attempts__lt=settings.CTXENG_MAX_ATTEMPTS
    ).update(
        status=JobStatus.RUNNING,
        attempts=F("attempts") + 1,
        claimed_at=now,
        heartbeat_at=now,
        claimed_by=claimed_by,
        updated_at=now,
    )
    if not claimed:
        return None
    return AssemblyJob.objects.filter(id=job_id).values_list("attempts", flat=True).first()


def _quoted(model: type[models.Model], *fields: str) -> tuple[str, dict[str, str]]:
    """`model`'s table and the columns of `fields`, quoted for this connection's SQL."""
    quote = connection.ops.quote_name
    return quote(model._meta.db_table), {name: quote(model._meta.get_field(name).column) for name in fields}


def _claim_returning(job_id: str | uuid.UUID, now: Any, claimed_by: str) -> int | None:
    table, column = _quoted(AssemblyJob, "id", "status", "attempts", "claimed_at", "heartbeat_at", "claimed_by", "updated_at")
    at = connection.ops.adapt_datetimefield_value(now)
    key = AssemblyJob._meta.pk.get_db_prep_value(job_id if isinstance(job_id, uuid.UUID) else uuid.UUID(str(job_id)), connection)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET {column['status']} = %s, {column['attempts']} = {column['attempts']} + 1, "
            f"{column['claimed_at']} = %s, {column['heartbeat_at']} = %s, {column['claimed_by']} = %s, {column['updated_at']} = %s "
            f"WHERE {column['id']} = %s AND {column['status']} = %s AND {column['attempts']} < %s RETURNING {column['attempts']}",
            [JobStatus.RUNNING.value, at, at, claimed_by, at, key, JobStatus.QUEUED.value, settings.CTXENG_MAX_ATTEMPTS],
        )
        row = cursor.fetchone()
    return None if row is None else int(row[0])


class _Heartbeats:
    """One thread per process refreshes heartbeat_at of every job the process is running.

    A thread per job cost a start and a join on every job, each a context switch that waits for
    a core; on a busy worker that was milliseconds per job. The thread starts on first use in
    each process (a forked pool process does not inherit the parent's threads). Each beat is
    guarded on the claim (running, same attempt), so a beat that races the seal changes nothing.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.jobs: dict[str, int] = {}
        self.pid: int | None = None

    def add(self, job_id: str, attempt: int) -> None:
        with self.lock:
            self.jobs[job_id] = attempt
            if self.pid != os.getpid():
                self.pid = os.getpid()
                threading.Thread(target=self._run, name="heartbeat", daemon=True).start()

    def remove(self, job_id: str) -> None:
        with self.lock:
            self.jobs.pop(job_id, None)

    def _run(self) -> None:
        while True:
            time.sleep(settings.CTXENG_HEARTBEAT_SECONDS)
            with self.lock:
                running = list(self.jobs.items())
            for job_id, attempt in running:
                try:
                    AssemblyJob.objects.filter(id=job_id, status=JobStatus.RUNNING, attempts=attempt).update(
                        heartbeat_at=timezone.now()
                    )
                except Exception:  # noqa: BLE001 - a missed beat must not kill the job
                    logger.warning("heartbeat for job %s failed", job_id, exc_info=True)
            # Seconds apart, so reconnecting is cheap; an idle connection would outlive its use
            # (and keep a test database from being dropped).
            try:
                connection.close()
            except Exception:  # noqa: BLE001 - the thread must outlive a broken connection
                logger.warning("heartbeat connection did not close cleanly", exc_info=True)


_heartbeats = _Heartbeats()


@contextlib.contextmanager
def assembly_job_heartbeat(*, job_id: str | uuid.UUID, attempt: int) -> Iterator[None]:
    """Refresh heartbeat_at every CTXENG_HEARTBEAT_SECONDS while the body runs (a live claim)."""
    _heartbeats.add(str(job_id), attempt)
    try:
        yield
    finally:
        _heartbeats.remove(str(job_id))


@functools.lru_cache(maxsize=64)
def _parsed_policy(revision_pk: int, digest: str) -> ContextPolicy:
    """A revision's parsed policy, once per worker process: jobs only run under published
    revisions, which are immutable (the digest in the key guards that)."""
    return parse_policy(PolicyRevision.objects.filter(pk=revision_pk).values_list("body", flat=True).get())


# Faults of the machinery, not of the job: another attempt may succeed. Everything else a job
# raises (the engine's InvalidInput, a storage constraint or DataError, a bug) fails every attempt.
INFRASTRUCTURE_FAULTS = (OperationalError, InterfaceError, ConnectionError, TimeoutError)


def assembly_job_assemble(*, job_id: str | uuid.UUID, attempt: int, traceparent: str | None = None) -> str:
    """Run the engine for a claimed job and seal the result; returns the job's final status.

    The whole path (load the job, assemble, seal and save) is inside one typed handling. A
    deterministic error ends the job `failed` at once, with the error on the job (the API's
    `error`, the dashboard; the log names the step). An infrastructure fault propagates: the
    claim stays, its heartbeat stops, and the stale-job sweep requeues the job as a new attempt
    (or ends it `failed` after CTXENG_MAX_ATTEMPTS).
    """
    step = "load"
    started_ns = time.perf_counter_ns()
    try:
        job = (
            AssemblyJob.objects.select_related("policy_revision__policy", "tenant", "run")
            .defer("policy_revision__body")
            .get(id=job_id)
        )
        _crash_point("claimed", job=job, attempt=attempt)
        traceparent = traceparent or job.traceparent or None  # a job re-sent by the sweep keeps its trace
        step = "assemble"
        policy = _parsed_policy(job.policy_revision.pk, job.policy_revision.digest)
        submitted = job_request(job, remember=True)
        request, artifacts = request_as_assembled(job=job, request=parse_request(submitted), policy=policy)
        # The cache status and figure compare with the run's previous step as this service sealed
        # it, whatever previous_cache the agent sent (issue 51, N10).
        request = request.model_copy(update={"previous_cache": previous_step_cache(job=job),
                                             "previous_prefix_identity": None})
        # The encoding follows request.model (the engine picks it); an inexact count gets the margin
        # this tenant's usage reports of the model give it.
        calibration = model_calibration(tenant_id=job.tenant_id, model=request.model, policy=policy)
        result = assemble(request, policy, artifacts=artifacts, calibration=calibration, previous_cache_from="service")
        _crash_point("assembled", job=job, attempt=attempt)
        step = "seal"
        sealed_ns = time.perf_counter_ns()
        status = _seal(job=job, attempt=attempt, result=result, request=request, labels=request_labels(submitted))
        if telemetry.enabled():
            telemetry.record_assembly(job_id=str(job.id), result=result, traceparent=traceparent,
                                      dashboard_url=f"{settings.CTXENG_PUBLIC_URL}/assemblies/{job.id}/",
                                      started_ns=started_ns, sealed_ns=sealed_ns, ended_ns=time.perf_counter_ns())
        return status
    except INFRASTRUCTURE_FAULTS:
        logger.warning("assembly job %s attempt %s: infrastructure fault at %s; left to the sweep", job_id, attempt, step)
        raise
    except InvalidInput as exc:
        return _fail(job_id=job_id, attempt=attempt, error=str(exc))
    except Exception as exc:  # noqa: BLE001 - deterministic: recorded on the job, never retried
        logger.exception("assembly job %s failed at %s", job_id, step)
        return _fail(job_id=job_id, attempt=attempt, error=f"{type(exc).__name__}: {exc}")


# Where the crash-consistency test kills a worker: after the claim, after the engine ran, inside
# the seal transaction after the status update and after the manifest insert, after the commit.
CRASH_POINTS = ("claimed", "assembled", "status_written", "manifest_written", "committed")


def _crash_point(point: str, *, job: AssemblyJob, attempt: int) -> None:
    """Test-only: SIGKILL this worker process at `point` of the first attempt of a job of run
    `crash-at-<point>` when CTXENG_TEST_CRASH_AT lists the point. Inert unless it is set."""
    if (
        settings.CTXENG_TEST_CRASH_AT
        and point in settings.CTXENG_TEST_CRASH_AT.split(",")
        and attempt == 1
        and job.run.run_id == f"crash-at-{point}"
        and not settings.CTXENG_JOBS_INLINE
    ):
        os.kill(os.getpid(), signal.SIGKILL)


def _fail(*, job_id: uuid.UUID, attempt: int, error: str) -> str:
    now = timezone.now()
    AssemblyJob.objects.filter(id=job_id, status=JobStatus.RUNNING, attempts=attempt).update(
        status=JobStatus.FAILED, error=error[:10_000], finished_at=now, updated_at=now
    )
    return JobStatus.FAILED


def _seal(*, job: AssemblyJob, attempt: int, result: Any, request: Any, labels: dict[str, str]) -> str:
    status = result.status
    now = timezone.now()
    # Derived and packed before the transaction, which then holds the write lock (SQLite) or the
    # row locks (PostgreSQL) for the writes alone. Transform excerpts begin the candidates'
    # contents, which the job's request already stored.
    prepared = _prepare_manifest(result.manifest_dict(), result.serialized_input,
                                 known=(item.content for item in request.candidates if item.content),
                                 records=record_texts(result.manifest), labels=labels)
    with transaction.atomic():
        won = AssemblyJob.objects.filter(id=job.id, status=JobStatus.RUNNING, attempts=attempt).update(
            status=status, finished_at=now, heartbeat_at=now, updated_at=now, error=""
        )
        if not won:
            # This attempt lost its claim (requeued as stale): the attempt that holds it seals.
            logger.warning("job %s attempt %s lost its claim; result discarded", job.id, attempt)
            return AssemblyJob.objects.filter(id=job.id).values_list("status", flat=True).first()
        _crash_point("status_written", job=job, attempt=attempt)
        _write_manifest(job=job, prepared=prepared, on_manifest=lambda: _crash_point("manifest_written", job=job, attempt=attempt))
    _crash_point("committed", job=job, attempt=attempt)
    return status


@dataclass
class _Prepared:
    document: dict[str, Any]
    sections: dict[str, Any]
    packer: Packer
    entries: list[tuple[str, dict[str, Any]]]
    document_packed: str
    payload_packed: str | None


# The manifest's per-item sections: thousands of records a job, each its own blob (shared with the
# steps before that decided the same), which the seal takes as pydantic wrote them (`record_texts`).
RECORD_SECTIONS = ("candidate_items", "included", "excluded")


def record_texts(manifest: Any) -> dict[str, list[str | None]]:
    """Each record of the manifest's RECORD_SECTIONS as JSON text, written by pydantic (in C, for a
    fraction of what walking its JSON form costs); None where it cannot be (a lone surrogate the
    JSON edge accepted), so that record is packed from its JSON form."""
    texts: dict[str, list[str | None]] = {}
    for name in RECORD_SECTIONS:
        texts[name] = []
        for record in getattr(manifest, name):
            try:
                texts[name].append(record.model_dump_json())
            except ValueError:
                texts[name].append(None)
    return texts


def _prepare_manifest(document: dict[str, Any], payload: Any, *, known: Any = (),
                      records: dict[str, list[str | None]] | None = None,
                      labels: dict[str, str] | None = None) -> _Prepared:
    """`records`: the JSON text of each record of `document`'s RECORD_SECTIONS, in order
    (`record_texts`), which packing then takes as the records' blobs. `labels`: item_id -> label
    from the submitted request (`item_labels.request_labels`), stored on the item decisions."""
    packer = Packer()
    packer.know(known)
    for name, texts in (records or {}).items():
        values = document.get(name) or []
        if len(values) != len(texts):
            raise ValueError(f"{name}: {len(texts)} record texts for {len(values)} records")
        for value, text in zip(values, texts, strict=True):
            if text is not None:
                packer.element_as(value, text)
    entries = _item_entries(document, packer, labels or {})
    return _Prepared(
        document=document,
        sections=page_sections(document),
        packer=packer,
        entries=entries,
        document_packed=pack_document(document, packer)[0],
        payload_packed=None if payload is None else pack_document(payload, packer)[0],
    )


ITEM_INSERT_BATCH = 300  # rows per INSERT: 900 parameters, within SQLite's and PostgreSQL's limits


def _write_manifest(*, job: AssemblyJob, prepared: _Prepared, on_manifest: Any = None) -> Manifest:
    """Store a sealed manifest by reference: its blobs, the row, its item decisions and rows (inside
    the caller's transaction)."""
    document = prepared.document
    assembly, budget = document.get("assembly") or {}, document.get("budget") or {}
    epoch = write_epoch()
    content_save(tenant=job.tenant, packer=prepared.packer, epoch=epoch)
    sealed = Manifest.objects.create(
        job=job,
        assembly_id=assembly["id"],
        status=assembly["status"],
        document_packed=prepared.document_packed,
        payload_packed=prepared.payload_packed,
        assembly_input_hash=assembly.get("assembly_input_hash") or "",
        serialized_model_input_hash=assembly.get("serialized_model_input_hash") or "",
        estimated_input_tokens=budget.get("estimated_used") or 0,
        sections=prepared.sections,
        **summary_columns(document),
    )
    if on_manifest is not None:
        on_manifest()
    ids = item_decisions_save(tenant=job.tenant, entries=prepared.entries, epoch=epoch)
    # Written in the default list's order, so the dashboard pages it by id (dashboard_selectors).
    order = sorted(range(len(prepared.entries)), key=lambda n: (
        reason_rank(prepared.entries[n][1]["decision"], prepared.entries[n][1]["reason"]), n))
    _insert_items(sealed.pk, [(ids[prepared.entries[n][0]], n) for n in order])
    return sealed


def _insert_items(manifest_pk: int, rows: list[tuple[int, int]]) -> None:
    """A manifest's ManifestItem rows, (entry id, position) each, in this order: plain SQL, as
    every job writes tens to thousands of them and a model instance per row cost more than the
    insert (the columns are three integers; there is nothing for the ORM to convert)."""
    table, columns = _quoted(ManifestItem, "manifest", "entry", "position")
    sql = f"INSERT INTO {table} ({', '.join(columns.values())}) VALUES "
    with connection.cursor() as cursor:
        for start in range(0, len(rows), ITEM_INSERT_BATCH):
            batch = rows[start:start + ITEM_INSERT_BATCH]
            cursor.execute(sql + ", ".join(["(%s, %s, %s)"] * len(batch)),
                           [value for entry, position in batch for value in (manifest_pk, entry, position)])


def summary_columns(document: dict[str, Any]) -> dict[str, Any]:
    """The manifest columns lists of manifests filter and group on, from the sealed document."""
    assembly, budget = document.get("assembly") or {}, document.get("budget") or {}
    model = assembly.get("model") or {}
    return {
        "blocked_reason": assembly.get("blocked_reason") or "",
        "usable_input": budget.get("usable_input"),
        "model_provider": model.get("provider") or "",
        "model_name": model.get("name") or "",
    }


def manifest_create(*, job: AssemblyJob, document: dict[str, Any], payload: Any = None) -> Manifest:
    """Seal `document` (a ContextAssemblyManifest as JSON) for `job` outside the worker: fixtures,
    imports. The same storage path as a worker's seal; the job's status is left as it is."""
    prepared = _prepare_manifest(document, payload, labels=request_labels(job_request(job, keys=("candidates", "tool_calls"))))
    with transaction.atomic():
        return _write_manifest(job=job, prepared=prepared)


def _item_entries(document: dict[str, Any], packer: Packer, labels: dict[str, str]) -> list[tuple[str, dict[str, Any]]]:
    """(record digest, decision columns) per decision, in manifest order, from the sealed document
    (the JSON form); each record is packed here, once, and reused when the document is packed.
    A decision's `label` is its item's in `labels` (the submitted request's), else blank: the
    pages then show the label its source_ref gives."""
    entries = [
        (packer.ref_of(item), {
            "item_id": item["item_id"],
            "decision": Decision.INCLUDED,
            "reason": item["admission_reason"],
            "partition": item["partition"],
            "zone": item.get("zone") or "",
            "tokens": item["tokens"],
            "trust": item["trust"],
            "role": item["intended_role"],
            "kind": item["kind"],
            "source_type": item["source_type"],
            "source_ref": item["source_ref"],
            "label": labels.get(item["item_id"], ""),
        })
        for item in document["included"]
    ]
    entries += [
        (packer.ref_of(item), {
            "item_id": item["item_id"],
            "decision": Decision.EXCLUDED,
            "reason": item["reason"],
            "hard_gate": item.get("hard_gate") or "",
            "detail": item["detail"],
            "partition": item.get("partition") or "",
            "tokens": item.get("tokens"),
            "trust": item.get("trust") or "",
            "role": item["intended_role"],
            "kind": item["kind"],
            "source_type": item["source_type"],
            "source_ref": item["source_ref"],
            "label": labels.get(item["item_id"], ""),
        })
        for item in document["excluded"]
    ]
    return entries


def item_decisions_save(*, tenant: Tenant, entries: list[tuple[str, dict[str, Any]]], epoch: int) -> dict[str, int]:
    """The ItemDecision id of each entry's digest, inserting the missing ones, all brought to the
    content epoch `epoch` (inside the manifest's transaction; the purge's race guard, shared with
    content: ctxeng.content.store.settle)."""
    wanted = dict(entries)

    def insert(missing: list[str]) -> None:
        ItemDecision.objects.bulk_create(
            [ItemDecision(tenant=tenant, digest=digest, epoch=epoch, **wanted[digest]) for digest in missing],
            ignore_conflicts=True, batch_size=500,
        )

    ids = settle(ItemDecision, tenant=tenant, digests=list(wanted), epoch=epoch, insert=insert)
    _item_labels_fill(ids=ids, wanted=wanted)
    return ids


LABEL_FILL_BATCH = 500


def _item_labels_fill(*, ids: dict[str, int], wanted: dict[str, dict[str, Any]]) -> None:
    """Give the stored decisions this seal reuses without a label (sealed before migration
    manifests.0011, or blanked by a content purge) the label this step's request gives them: a
    user turn repeated from an older step is named by its words again. One indexed read per
    LABEL_FILL_BATCH decisions; an update per decision filled (none once the labels are there)."""
    labelled = {ids[digest]: entry["label"] for digest, entry in wanted.items() if entry.get("label")}
    pks = sorted(labelled)
    for start in range(0, len(pks), LABEL_FILL_BATCH):
        blank = ItemDecision.objects.filter(pk__in=pks[start:start + LABEL_FILL_BATCH], label="")
        for pk in blank.values_list("pk", flat=True):
            ItemDecision.objects.filter(pk=pk, label="").update(label=labelled[pk])


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
    for job_id, attempts, heartbeat, tenant_id in stale.values_list("id", "attempts", "heartbeat_at", "tenant_id"):
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
            assembly_job_enqueue(job_id=job_id, tenant_id=tenant_id)
    forgotten_before = now - timedelta(seconds=settings.CTXENG_REQUEUE_QUEUED_AFTER_SECONDS)
    forgotten = AssemblyJob.objects.filter(status=JobStatus.QUEUED, enqueued_at__lt=forgotten_before)
    for job_id, enqueued_at, tenant_id in forgotten.values_list("id", "enqueued_at", "tenant_id"):
        if AssemblyJob.objects.filter(id=job_id, status=JobStatus.QUEUED, enqueued_at=enqueued_at).update(
            enqueued_at=now
        ):
            counts["resent"] += 1
            assembly_job_enqueue(job_id=job_id, tenant_id=tenant_id)
    # Recorded steps whose verification message was lost (a broker outage, a worker lost mid-run):
    # verifying is idempotent, so a re-send is safe even when the first is still under way.
    pending = AssemblyJob.objects.filter(origin=Origin.RECORDED, verification=Verification.PENDING,
                                         enqueued_at__lt=forgotten_before)
    for job_id, enqueued_at, tenant_id in pending.values_list("id", "enqueued_at", "tenant_id"):
        if AssemblyJob.objects.filter(id=job_id, verification=Verification.PENDING, enqueued_at=enqueued_at).update(
            enqueued_at=now
        ):
            counts["resent"] += 1
            recorded_step_enqueue(job_id=job_id, tenant_id=tenant_id)
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
    packer = Packer()
    packer.add_text(content)
    try:
        with transaction.atomic():
            added = content_save(tenant=tenant, packer=packer)
            quotas.lock_tenant(tenant)
            # A body another artifact of the tenant already holds is no new artifact bytes.
            new_body = not Artifact.objects.filter(tenant=tenant, content_hash=actual).exists()
            artifact = Artifact.objects.create(
                tenant=tenant,
                artifact_id=artifact_id,
                revision=str(revision),
                kind=kind,
                content_hash=actual,
                writer=writer,
                scope=scope,
                created_by=user,
            )
            quotas.check_stored(tenant=tenant, added=added, new_artifact_body=new_body)
            return artifact, True
    except IntegrityError:
        raise Conflict(f"artifact {artifact_id} revision {revision} was written concurrently") from None


def usage_report_record(
    *, manifest: Manifest, user: AbstractBaseUser | None, input_tokens: int, cached_tokens: int, output_tokens: int
) -> UsageReport:
    """Record (or replace) the provider's reported usage beside the estimate; the manifest is untouched.

    The cached part is part of the input (clients fold Anthropic's cache reads and writes into
    `input_tokens`), so more cached than input tokens is no report: BadReference. A count far from
    the estimate is recorded, and calibration leaves it out (selectors.usage_in_band). Only a ready
    assembly produced a model input: usage for any other is no call's usage (Conflict)."""
    if manifest.status != JobStatus.READY:
        raise Conflict(f"assembly {manifest.job_id} is {manifest.status}; no model call was made with it")
    if cached_tokens > input_tokens:
        raise BadReference(f"cached_tokens: {cached_tokens} is more than input_tokens {input_tokens} "
                           "(the cached part is counted in the input)")
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
    if telemetry.enabled():
        transaction.on_commit(lambda: _trace_usage(manifest=manifest, report=report))
    return report


def _trace_usage(*, manifest: Manifest, report: UsageReport) -> None:
    """The report as a `ctxeng.usage` span, a child of the assembly's span (ctxeng.telemetry)."""
    job_id = str(manifest.job_id)
    submitted = AssemblyJob.objects.filter(id=manifest.job_id).values_list("traceparent", flat=True).first()
    telemetry.record_usage(
        parent=telemetry.job_traceparent(job_id, submitted or None),
        attributes=telemetry.usage_attributes(
            input_tokens=report.input_tokens, output_tokens=report.output_tokens, cached_tokens=report.cached_tokens,
            model={"provider": manifest.model_provider, "name": manifest.model_name},
            assembly_id=manifest.assembly_id, estimated_input_tokens=report.estimated_input_tokens, job_id=job_id,
        ),
    )


# --------------------------------------------------------------------------- retention


def manifest_purge_content(*, manifest: Manifest, now: Any = None) -> bool:
    """Remove a sealed manifest's content bodies (manifests.retention), keeping what explains it.

    The provider input and the transforms' excerpts go; the job's stored request loses each
    candidate's content. Hashes, decisions, reasons and lineage stay, and `content_purged_at`
    records when. The skeletons are rewritten to name only what is kept; the bodies themselves
    leave the store when no other holder refers to them (`content_purge`). The only path that
    changes a sealed manifest (Manifest.save permits exactly this); the item decisions only this
    and other purged manifests use lose their stored labels (a later seal that reuses one gives
    it its request's label again). Already purged: False.
    """
    from .retention import purged_document, purged_request

    now = now or timezone.now()
    with transaction.atomic():
        locked = (
            Manifest.objects.select_for_update().select_related("job__tenant")
            .filter(pk=manifest.pk, content_purged_at__isnull=True).first()
        )
        if locked is None:
            return False
        tenant = locked.job.tenant
        packer = Packer()
        document, _ = pack_document(purged_document(content_read(tenant_id=tenant.pk, skeleton=locked.document_packed)), packer)
        request_skeleton = AssemblyJob.objects.filter(pk=locked.job_id).values_list("request_packed", flat=True).first()
        request, _ = pack_document(purged_request(content_read(tenant_id=tenant.pk, skeleton=request_skeleton or "{}")), packer)
        content_save(tenant=tenant, packer=packer)
        locked.document_packed = document
        locked.payload_packed = None
        locked.content_purged_at = now
        locked.save()
        AssemblyJob.objects.filter(pk=locked.job_id).update(request_packed=request)
        _item_labels_purge(manifest_pk=locked.pk)
    manifest.document_packed, manifest.payload_packed, manifest.content_purged_at = document, None, now
    return True


def _item_labels_purge(*, manifest_pk: int) -> None:
    """Blank the stored labels (a message's first words are its content) of the manifest's item
    decisions that no unpurged manifest still uses; the pages then show the labels their source
    refs give. The one change an item decision accepts, as a bulk update (its `save` refuses)."""
    in_use = ManifestItem.bare.filter(entry=models.OuterRef("pk"), manifest__content_purged_at__isnull=True)
    (ItemDecision.objects.filter(pk__in=ManifestItem.bare.filter(manifest_id=manifest_pk).values("entry"))
     .exclude(label="").exclude(models.Exists(in_use)).update(label=""))


def manifests_purge_content(*, older_than: timedelta, now: Any = None) -> int:
    """Purge every manifest sealed more than `older_than` ago that still has its content."""
    now = now or timezone.now()
    ids = list(
        Manifest.objects.filter(created_at__lt=now - older_than, content_purged_at__isnull=True)
        .order_by("created_at").values_list("pk", flat=True)
    )
    purged = 0
    for pk in ids:
        purged += manifest_purge_content(manifest=Manifest(pk=pk), now=now)
    return purged
