"""REST API for assemblies, item decisions and artifacts: thin views over services and selectors.

Assembly requests are validated by the engine's AssemblyRequest model (400 with field paths);
the OpenAPI schema references the engine's JSON Schema instead of re-declaring it. Responses are
documented by the pydantic models below (the `*Out` shapes the views build; the manifest is the
engine's ContextAssemblyManifest).

`GET assemblies/{id}/?wait=S&include=manifest,input` is a long-poll: it answers once the job is
final or S seconds (at most MAX_WAIT_SECONDS; longer is clamped) have passed, and `include` adds
the manifest and the provider input to a final job, so a client submits and waits in two
requests. A waiting request holds a web worker (a thread or process) for up to the wait, but no
database transaction (`selectors.job_get_when_final`); so at most CTXENG_LONGPOLL_MAX_TOTAL wait at
once overall and CTXENG_LONGPOLL_MAX_PER_TENANT per tenant (`selectors.job_long_poll`), and beyond
either the job is answered at once as it is, with `Retry-After` (never an error).

Each view method only carries its OpenAPI description (`@extend_schema`) and calls a module-level
function named after its operation id (`assemblies_list`, ...), which parses, calls a service or
selector and serializes: mutmut does not mutate decorated functions, so the logic lives where
`make mutate-sample` measures it (docs/mutation.md).
"""

from __future__ import annotations

import logging
import math
import uuid
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from django.db import InterfaceError, OperationalError
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from pydantic import BaseModel, ConfigDict, Field, RootModel
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ctxeng.accounts.models import Role
from ctxeng.accounts.selectors import roles_in, tenant_for_role
from ctxeng.engine import AssemblyRequest, ContextAssemblyManifest
from ctxeng.engine.limits import MAX_ID, MAX_INT32, MAX_ITEM_ID, MAX_NAME, Id, id_problem
from ctxeng.server.errors import Conflict, Forbidden
from ctxeng.server.rest import (
    PAGINATION_PARAMETERS,
    ApiError,
    BoundedPagination,
    id_param,
    read_json,
    read_model,
)
from ctxeng.telemetry import traceparent_header
from policies.models import RevisionStatus

from . import selectors, services
from .models import Artifact, AssemblyJob, Decision, JobStatus, Manifest, Origin, Verification

logger = logging.getLogger(__name__)


def assembly_html_url(job: AssemblyJob) -> str:
    return f"/assemblies/{job.id}/"


def run_html_url(run_id: str) -> str:
    # reverse() quotes what a path cannot hold raw (`?`, `#`, `%`, spaces), so every id links.
    return reverse("run", args=[run_id])


MAX_WAIT_SECONDS = 30
INCLUDABLE = ("manifest", "input")

# A job's status as the schema publishes it (its own component: the engine's AssemblyStatus is a manifest's).
AssemblyJobStatus = StrEnum("AssemblyJobStatus", {status.name: status.value for status in JobStatus})


class _Out(BaseModel):
    """A documented response shape (the views build the dicts; these publish them)."""

    model_config = ConfigDict(extra="forbid")


class PolicyRevisionState(StrEnum):
    PUBLISHED = "published"
    RETIRED = "retired"


class AssemblyPolicyOut(_Out):
    id: str
    revision: int
    digest: str
    status: PolicyRevisionState = Field(description="the revision's status now: `retired` once a later revision of the "
                                                    "policy was published (an assembly may still be pinned to it)")
    current: bool = Field(description="false when the assembly ran under a revision that is no longer the policy's "
                                      "published one (the dashboard marks it `retired revision`)")


JobOrigin = StrEnum("JobOrigin", {origin.name: origin.value for origin in Origin})
VerificationStatus = StrEnum("VerificationStatus", {v.name: v.value for v in Verification})


class VerificationOut(_Out):
    """A recorded step's re-assembly on a worker under the same policy revision."""

    status: VerificationStatus = Field(description="`pending` until a worker re-assembled the step; `verified`: the same "
                                                   "decisions and the same serialized_model_input_hash; `diverged`: "
                                                   "`detail` names the first difference; `unverifiable`: `detail` names "
                                                   "what the service lacks (the policy revision's body, an artifact)")
    detail: str | None
    verified_at: datetime | None


class AssemblyJobOut(_Out):
    """An assembly job: `manifest_url` once sealed, `input_url` once ready (None when blocked, and
    for a recorded step, whose model input stayed in the agent's process)."""

    id: uuid.UUID
    status: AssemblyJobStatus
    run_id: str
    step_id: str
    tenant: str
    policy: AssemblyPolicyOut
    url: str
    html_url: str
    run_html_url: str
    manifest_url: str | None
    input_url: str | None
    assembly_id: str | None
    content_purged_at: datetime | None
    error: str | None
    attempts: int
    created_at: datetime
    finished_at: datetime | None
    origin: JobOrigin = Field(description="`remote`: assembled by the service; `recorded`: assembled in the agent's "
                                          "process and recorded (POST recorded-steps/)")
    verification: VerificationOut | None = Field(description="recorded steps only (null for remote ones)")


class ProviderMessage(BaseModel):
    """One message of a provider payload; its other keys (tool_calls, tool_call_id) are the provider's."""

    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None


class OpenAIChatInput(_Out):
    """`openai_chat`: the keyword arguments of `chat.completions.create`."""

    model: str
    messages: list[ProviderMessage]
    tools: list[dict[str, Any]] | None = Field(default=None, description="present only when the payload has tools")


class AnthropicMessagesInput(_Out):
    """`anthropic_messages`: the keyword arguments of `messages.create`."""

    model: str
    max_tokens: int
    system: str
    messages: list[ProviderMessage]
    tools: list[dict[str, Any]] | None = Field(default=None, description="present only when the payload has tools")


ProviderInput = OpenAIChatInput | AnthropicMessagesInput


class AssemblyJobDetailOut(AssemblyJobOut):
    """The job; `manifest` and `input` are present when `include` names them (null until the job
    is final; `input` null when blocked or purged)."""

    manifest: ContextAssemblyManifest | None = None
    input: ProviderInput | None = None


class AssemblySubmittedOut(_Out):
    id: uuid.UUID
    status: AssemblyJobStatus
    url: str
    html_url: str


class _Page(_Out):
    count: int
    next: str | None
    previous: str | None


class AssemblyJobPage(_Page):
    results: list[AssemblyJobOut]


class ProviderInputOut(RootModel[ProviderInput]):
    """The serialized provider input, as the request's (or the policy's) adapter made it."""


class UsageOut(_Out):
    id: uuid.UUID
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    estimated_input_tokens: int
    estimate_error: int = Field(description="estimated_input_tokens - input_tokens")
    used_for_calibration: bool = Field(
        description="whether calibration reads this report: false for an outlier, a count outside "
                    "CTXENG_USAGE_RATIO_MIN..MAX times the estimate (stored for review, never calibrated on)")
    reported_at: datetime


class ItemDecisionOut(_Out):
    item_id: str
    assembly: uuid.UUID
    assembly_id: str
    tenant: str = Field(description="the tenant of the run: a user in several tenants can hold the same run id in each")
    run_id: str
    step_id: str
    manifest_status: str
    decision: str
    reason: str
    hard_gate: str | None
    detail: str | None
    partition: str | None
    tokens: int | None
    trust: str | None
    role: str
    kind: str
    source_type: str
    source_ref: dict[str, Any] = Field(description="the item's free-form source reference, as submitted")
    sealed_at: datetime
    html_url: str


class ItemDecisionPage(_Page):
    results: list[ItemDecisionOut]


class ArtifactOut(_Out):
    artifact_id: str
    revision: str
    kind: str
    content_hash: str
    writer: str
    scope: str
    tenant: str
    created_at: datetime


class ArtifactPage(_Page):
    results: list[ArtifactOut]


class RunClosedOut(_Out):
    run_id: str
    tenant: str
    closed_at: datetime
    html_url: str


def _wait_seconds(value: str | None) -> float:
    """`?wait=`: seconds to long-poll (0 when absent); above MAX_WAIT_SECONDS it is clamped."""
    if value is None:
        return 0.0
    try:
        # float() reads `٣` and `１` as 3 and 1: a number here is written in ASCII.
        seconds = float(value) if value.isascii() else math.nan
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise ApiError(status.HTTP_400_BAD_REQUEST,
                       f"wait: expected a number of seconds from 0 to {MAX_WAIT_SECONDS} (longer waits are "
                       f"clamped), got {value!r}")
    return min(seconds, MAX_WAIT_SECONDS)


def _included(values: list[str]) -> set[str]:
    """`?include=manifest,input` (or repeated: `include=manifest&include=input`)."""
    names = {name.strip() for value in values for name in value.split(",") if name.strip()}
    unknown = sorted(names - set(INCLUDABLE))
    if unknown:
        raise ApiError(status.HTTP_400_BAD_REQUEST,
                       f"include: expected a comma-separated list of {', '.join(INCLUDABLE)}, got {', '.join(map(repr, unknown))}")
    return names


def job_json(job: AssemblyJob) -> dict[str, Any]:
    revision = job.policy_revision
    manifest: Manifest | None = getattr(job, "manifest", None) if job.is_final else None
    return {
        "id": str(job.id),
        "status": job.status,
        "run_id": job.run.run_id,
        "step_id": job.step_id,
        "tenant": job.tenant.slug,
        "policy": {"id": revision.policy.policy_id, "revision": revision.revision, "digest": revision.digest,
                   "status": revision.status, "current": revision.status == RevisionStatus.PUBLISHED},
        "url": reverse("api-assembly", args=[job.id]),
        "html_url": assembly_html_url(job),
        "run_html_url": run_html_url(job.run.run_id),
        "manifest_url": reverse("api-assembly-manifest", args=[job.id]) if manifest else None,
        "input_url": (reverse("api-assembly-input", args=[job.id])
                      if manifest and job.status == JobStatus.READY and job.origin == Origin.REMOTE else None),
        "assembly_id": manifest.assembly_id if manifest else None,
        "content_purged_at": manifest.content_purged_at if manifest else None,
        "error": job.error or None,
        "attempts": job.attempts,
        "created_at": job.created_at,
        "finished_at": job.finished_at,
        "origin": job.origin,
        "verification": verification_json(job),
    }


def verification_json(job: AssemblyJob) -> dict[str, Any] | None:
    if job.origin != Origin.RECORDED:
        return None
    return {"status": job.verification, "detail": job.verification_detail or None, "verified_at": job.verified_at}


JOB_ID = OpenApiParameter("job_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="the assembly's id")
WAIT = OpenApiParameter(
    "wait", {"type": "number", "minimum": 0}, description=(
        f"long-poll: answer once the job is final or after this many seconds (at most {MAX_WAIT_SECONDS}; "
        "a longer wait is clamped; 0 or absent: at once). When the server's long-poll caps are reached "
        "(overall or the tenant's), the job is answered at once as it is, with `Retry-After`"))
INCLUDE = OpenApiParameter(
    "include", {"type": "array", "items": {"type": "string", "enum": list(INCLUDABLE)}}, explode=False,
    description="documents to add to a final job: `manifest` (as GET manifest/ serves it) and `input` "
                "(as GET input/ serves it; null when blocked or purged), e.g. `include=manifest,input`")


def _sealed_manifest(job: AssemblyJob) -> Manifest:
    manifest = selectors.job_manifest(job)
    if manifest is None:
        if job.status == JobStatus.FAILED:
            raise Conflict(f"assembly {job.id} failed: {job.error}")
        raise Conflict(f"assembly {job.id} is {job.status}; no manifest yet")
    return manifest


def assemblies_list(request: Request) -> Response:
    """`GET assemblies/`: the jobs of the user's tenants, filtered and paginated."""
    wanted_status = request.query_params.get("status")
    if wanted_status is not None and wanted_status not in JobStatus.values:
        raise ApiError(status.HTTP_400_BAD_REQUEST,
                       f"status: expected one of {', '.join(JobStatus.values)}, got {wanted_status!r}")
    origin = request.query_params.get("origin")
    if origin is not None and origin not in Origin.values:
        raise ApiError(status.HTTP_400_BAD_REQUEST, f"origin: expected one of {', '.join(Origin.values)}, got {origin!r}")
    verification = request.query_params.get("verification")
    if verification is not None and verification not in Verification.values:
        raise ApiError(status.HTTP_400_BAD_REQUEST,
                       f"verification: expected one of {', '.join(Verification.values)}, got {verification!r}")
    jobs = selectors.jobs_for(
        request.user,
        run_id=id_param("run_id", request.query_params.get("run_id")),
        status=wanted_status,
        policy=id_param("policy", request.query_params.get("policy")),
        origin=origin,
        verification=verification,
    )
    paginator = BoundedPagination()
    page = paginator.paginate_queryset(jobs, request)
    return paginator.get_paginated_response([job_json(job) for job in page])


def assemblies_submit(request: Request) -> Response:
    """`POST assemblies/`: submit a job (202), or answer the earlier one with this Idempotency-Key (200)."""
    key = request.headers.get("Idempotency-Key")
    if key is not None and len(key) > MAX_ID:
        raise ApiError(status.HTTP_400_BAD_REQUEST,
                       f"Idempotency-Key: {len(key)} characters, more than the limit {MAX_ID}")
    if key and id_problem(key):
        raise ApiError(status.HTTP_400_BAD_REQUEST, f"Idempotency-Key: {id_problem(key)}")
    data = read_json(request)
    job, created = services.assembly_job_submit(user=request.user, data=data, idempotency_key=key,
                                                traceparent=traceparent_header(request.headers.get("traceparent")))
    try:
        job.refresh_from_db(fields=["status"])  # a job run in-process on commit is final already
    except (OperationalError, InterfaceError):
        # Committed: answer the job as saved. A 503 would say it was not applied, and a retry
        # without an Idempotency-Key would make a second job.
        logger.warning("database lost after assembly %s was committed; answering it as saved", job.id)
    body = {"id": str(job.id), "status": job.status, "url": reverse("api-assembly", args=[job.id]),
            "html_url": assembly_html_url(job)}
    return Response(body, status=status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK)


class AssemblyListApi(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("run_id", str),
            OpenApiParameter("status", str, enum=JobStatus.values),
            OpenApiParameter("policy", str, description="policy id"),
            OpenApiParameter("origin", str, enum=Origin.values, description="remote or recorded steps only"),
            OpenApiParameter("verification", str, enum=Verification.values,
                             description="recorded steps in this verification state, e.g. `diverged`"),
            *PAGINATION_PARAMETERS,
        ],
        responses={200: AssemblyJobPage},
        summary="Assembly jobs in your tenants",
        operation_id="assemblies_list",
    )
    def get(self, request: Request) -> Response:
        return assemblies_list(request)

    @extend_schema(
        request=AssemblyRequest,
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER,
                                     description=f"at most {MAX_ID} characters"),
                    OpenApiParameter("traceparent", str, OpenApiParameter.HEADER,
                                     description="W3C trace context: the assembly's span becomes a child of "
                                                 "this one (OpenTelemetry export on; a malformed value is ignored)")],
        responses={202: OpenApiResponse(AssemblySubmittedOut, description="a new job, queued (or already final)"),
                   200: OpenApiResponse(AssemblySubmittedOut, description="the job an earlier submit with this "
                                                                          "Idempotency-Key and body created"),
                   409: OpenApiResponse(OpenApiTypes.OBJECT, description="the Idempotency-Key was used for another body"),
                   504: OpenApiResponse(OpenApiTypes.OBJECT, description="the database broke off during the commit and "
                                                                         "cannot be asked whether the job was saved: retry "
                                                                         "with the same Idempotency-Key after Retry-After")},
        summary="Submit an assembly job (202); long-poll its url (`?wait=30&include=manifest,input`)",
        operation_id="assemblies_submit",
    )
    def post(self, request: Request) -> Response:
        return assemblies_submit(request)


def assemblies_get(request: Request, job_id: str) -> Response:
    """`GET assemblies/{id}/`: the job, long-polled with `wait`, with the documents `include` names."""
    wait = _wait_seconds(request.query_params.get("wait"))
    include = _included(request.query_params.getlist("include"))
    job, retry_after = selectors.job_long_poll(request.user, job_id, wait=wait)
    body = job_json(job)
    manifest = selectors.job_manifest(job) if include and job.is_final else None
    if "manifest" in include:
        body["manifest"] = selectors.manifest_as_served(manifest) if manifest else None
    if "input" in include:
        readable = manifest is not None and manifest.content_purged_at is None
        body["input"] = selectors.manifest_payload(manifest) if readable else None
    # The long-poll caps were reached: the job as it is, at once, and when to ask again.
    return Response(body, headers={"Retry-After": str(retry_after)} if retry_after is not None else None)


class AssemblyDetailApi(APIView):
    @extend_schema(parameters=[JOB_ID, WAIT, INCLUDE], responses={200: AssemblyJobDetailOut},
                   summary="One assembly job; with `wait`, once it is final (a long-poll)",
                   operation_id="assemblies_get")
    def get(self, request: Request, job_id: str) -> Response:
        return assemblies_get(request, job_id)


def assemblies_manifest(request: Request, job_id: str) -> Response:
    """`GET assemblies/{id}/manifest/`: the sealed manifest (409 before it is sealed)."""
    return Response(selectors.manifest_as_served(_sealed_manifest(selectors.job_get(request.user, job_id))))


class AssemblyManifestApi(APIView):
    @extend_schema(parameters=[JOB_ID], responses={200: ContextAssemblyManifest, 409: OpenApiTypes.OBJECT},
                   summary="The sealed manifest", operation_id="assemblies_manifest")
    def get(self, request: Request, job_id: str) -> Response:
        return assemblies_manifest(request, job_id)


def assemblies_input(request: Request, job_id: str) -> Response:
    """`GET assemblies/{id}/input/`: the provider input (409 when blocked, 410 once purged)."""
    job = selectors.job_get(request.user, job_id)
    manifest = _sealed_manifest(job)
    if manifest.content_purged_at is not None:
        raise ApiError(status.HTTP_410_GONE, f"assembly {job.id}: content purged at "
                       f"{manifest.content_purged_at.isoformat()} (retention); the manifest keeps its hashes")
    if manifest.payload_packed is None and job.origin == Origin.RECORDED:
        raise Conflict(f"assembly {job.id} was recorded: the agent assembled it in its own process and kept the model "
                       "input there (the manifest's serialized_model_input_hash identifies it)")
    if manifest.payload_packed is None:
        reason = (selectors.manifest_document(manifest, sections=("assembly",)).get("assembly") or {}).get("blocked_reason")
        raise Conflict(f"assembly {job.id} is {manifest.status} ({reason}); there is no model input")
    return Response(selectors.manifest_payload(manifest))


class AssemblyInputApi(APIView):
    @extend_schema(parameters=[JOB_ID], responses={200: ProviderInputOut, 409: OpenApiTypes.OBJECT,
                                                   410: OpenApiTypes.OBJECT},
                   summary="The serialized provider input (409 when blocked, 410 once its content was purged)",
                   operation_id="assemblies_input")
    def get(self, request: Request, job_id: str) -> Response:
        return assemblies_input(request, job_id)


def assemblies_request(request: Request, job_id: str) -> Response:
    """`GET assemblies/{id}/request/`: the request as submitted."""
    return Response(selectors.job_request(selectors.job_get(request.user, job_id)))


class AssemblyRequestApi(APIView):
    @extend_schema(parameters=[JOB_ID], responses={200: AssemblyRequest},
                   summary="The request as submitted (rebuilt from the content store; candidates lose their "
                           "content once the manifest's content is purged)",
                   operation_id="assemblies_request")
    def get(self, request: Request, job_id: str) -> Response:
        return assemblies_request(request, job_id)


class UsageBody(BaseModel):
    """The provider's reported usage for the call made with this assembly's input."""

    model_config = ConfigDict(extra="forbid", strict=True)  # strict: `true` is not 1
    input_tokens: int = Field(ge=0, le=MAX_INT32)
    cached_tokens: int = Field(default=0, ge=0, le=MAX_INT32)
    output_tokens: int = Field(default=0, ge=0, le=MAX_INT32)


def assemblies_usage(request: Request, job_id: str) -> Response:
    """`POST assemblies/{id}/usage/`: record the provider's reported usage of a ready assembly's input."""
    job = selectors.job_get(request.user, job_id)
    if Role.AGENT not in roles_in(request.user, job.tenant):
        raise Forbidden(f"the agent role is required in tenant {job.tenant.slug!r}")
    payload = read_model(request, UsageBody, what="usage report")
    manifest = _sealed_manifest(job)
    report = services.usage_report_record(manifest=manifest, user=request.user, **payload.model_dump())
    return Response({
        "id": str(job.id),
        "input_tokens": report.input_tokens,
        "cached_tokens": report.cached_tokens,
        "output_tokens": report.output_tokens,
        "estimated_input_tokens": report.estimated_input_tokens,
        "estimate_error": report.estimated_input_tokens - report.input_tokens,
        "used_for_calibration": selectors.usage_report_in_band(report),
        "reported_at": report.reported_at,
    })


class AssemblyUsageApi(APIView):
    @extend_schema(request=UsageBody, parameters=[JOB_ID], responses={200: UsageOut, 409: OpenApiTypes.OBJECT},
                   summary="Report the provider's actual token usage (stored beside the estimate; a new report "
                           "replaces the last, so a repeat is harmless)",
                   operation_id="assemblies_usage")
    def post(self, request: Request, job_id: str) -> Response:
        return assemblies_usage(request, job_id)


def items_decisions(request: Request, item_id: str) -> Response:
    """`GET items/{item_id}/decisions/`: every manifest where the item appeared, paginated."""
    rows = selectors.item_decisions(request.user, id_param("item_id", item_id))
    decision = request.query_params.get("decision")
    if decision is not None and decision not in Decision.values:
        raise ApiError(status.HTTP_400_BAD_REQUEST,
                       f"decision: expected one of {', '.join(Decision.values)}, got {decision!r}")
    if decision:
        rows = rows.filter(decision=decision)
    paginator = BoundedPagination()
    page = paginator.paginate_queryset(rows, request)
    return paginator.get_paginated_response([
        {
            "item_id": row.item_id,
            "assembly": str(row.manifest.job_id),
            "assembly_id": row.manifest.assembly_id,
            "tenant": row.manifest.job.tenant.slug,
            "run_id": row.manifest.job.run.run_id,
            "step_id": row.manifest.job.step_id,
            "manifest_status": row.manifest.status,
            "decision": row.decision,
            "reason": row.reason,
            "hard_gate": row.hard_gate or None,
            "detail": row.detail or None,
            "partition": row.partition or None,
            "tokens": row.tokens,
            "trust": row.trust or None,
            "role": row.role,
            "kind": row.kind,
            "source_type": row.source_type,
            "source_ref": row.source_ref,
            "sealed_at": row.manifest.created_at,
            "html_url": assembly_html_url(row.manifest.job),
        }
        for row in page
    ])


class ItemDecisionsApi(APIView):
    @extend_schema(parameters=[OpenApiParameter("decision", str, enum=Decision.values), *PAGINATION_PARAMETERS],
                   responses={200: ItemDecisionPage},
                   summary="Every manifest where an item appeared, with the decision and reason",
                   operation_id="items_decisions")
    def get(self, request: Request, item_id: str) -> Response:
        return items_decisions(request, item_id)


class ArtifactBody(BaseModel):
    """An externalized object; a candidate re-injects it with `artifact_ref: {artifact_id, revision}`."""

    model_config = ConfigDict(extra="forbid", strict=True)  # strict: `true` is not 1
    artifact_id: Id = Field(min_length=1, max_length=MAX_ITEM_ID)
    revision: int | Annotated[str, Field(min_length=1, max_length=MAX_NAME)]
    kind: str = Field(min_length=1, max_length=MAX_NAME)
    content: str
    content_hash: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")
    writer: Id = Field(min_length=1, max_length=MAX_ID)
    scope: str = Field(min_length=1, max_length=MAX_ITEM_ID)
    tenant: str | None = Field(default=None, max_length=MAX_NAME,
                               description="defaults to your only tenant with the agent role")


def artifact_json(artifact: Artifact, *, with_content: bool = False) -> dict[str, Any]:
    data = {
        "artifact_id": artifact.artifact_id,
        "revision": artifact.revision,
        "kind": artifact.kind,
        "content_hash": artifact.content_hash,
        "writer": artifact.writer,
        "scope": artifact.scope,
        "tenant": artifact.tenant.slug,
        "created_at": artifact.created_at,
    }
    if with_content:
        data["content"] = selectors.artifact_content(artifact)
    return data


def artifacts_list(request: Request) -> Response:
    """`GET artifacts/`: the artifacts of the user's tenants, paginated."""
    artifacts = selectors.artifacts_for(request.user, artifact_id=id_param("artifact_id", request.query_params.get("artifact_id")))
    paginator = BoundedPagination()
    page = paginator.paginate_queryset(artifacts, request)
    return paginator.get_paginated_response([artifact_json(a) for a in page])


def artifacts_create(request: Request) -> Response:
    """`POST artifacts/`: store an artifact revision (201), or answer the identical one stored (200)."""
    payload = read_model(request, ArtifactBody, what="artifact")
    tenant = tenant_for_role(request.user, role=Role.AGENT, slug=payload.tenant)
    artifact, created = services.artifact_create(
        user=request.user, tenant=tenant, **payload.model_dump(exclude={"tenant"})
    )
    return Response(artifact_json(artifact), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class ArtifactListApi(APIView):
    @extend_schema(parameters=[OpenApiParameter("artifact_id", str), *PAGINATION_PARAMETERS], responses={200: ArtifactPage},
                   summary="Artifacts in your tenants", operation_id="artifacts_list")
    def get(self, request: Request) -> Response:
        return artifacts_list(request)

    @extend_schema(request=ArtifactBody, responses={201: OpenApiResponse(ArtifactOut, description="stored"),
                                                   200: OpenApiResponse(ArtifactOut, description="already stored"),
                                                   409: OpenApiTypes.OBJECT},
                   summary="Store an artifact revision (re-posting identical content is a no-op)",
                   operation_id="artifacts_create")
    def post(self, request: Request) -> Response:
        return artifacts_create(request)


class RunCloseBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    tenant: str | None = Field(default=None, max_length=MAX_NAME, description="defaults to your only tenant with the agent role")


def runs_close(request: Request, run_id: str) -> Response:
    """`POST runs/{run_id}/close/`: close a run in the agent's tenant."""
    payload = read_model(request, RunCloseBody, what="run") if request.body else RunCloseBody()
    tenant = tenant_for_role(request.user, role=Role.AGENT, slug=payload.tenant)
    run = services.run_close(user=request.user, tenant=tenant, run_id=id_param("run_id", run_id))
    return Response({"run_id": run.run_id, "tenant": tenant.slug, "closed_at": run.closed_at,
                     "html_url": run_html_url(run.run_id)})


class RunCloseApi(APIView):
    @extend_schema(request=RunCloseBody, responses={200: RunClosedOut, 404: OpenApiTypes.OBJECT},
                   summary="Close a run: its task closes, later steps are blocked with a task_closed event",
                   operation_id="runs_close")
    def post(self, request: Request, run_id: str) -> Response:
        return runs_close(request, run_id)


# --------------------------------------------------------------------------- recorded steps

MAX_RECORDED_BATCH = 50  # steps in one POST (sdk.Recorder sends at most this many)
MAX_DROPPED_ROWS = 1000


class RecordedStepBody(BaseModel):
    """One step as parsed: its request and manifest are validated per step by the service (so one
    invalid step refuses only itself); `RecordedStepDoc` documents the same with their schemas."""

    model_config = ConfigDict(extra="forbid", strict=True)
    idempotency_key: Id = Field(min_length=1, max_length=MAX_ID, description="`<run_id>/<step_id>`")
    request: dict[str, Any]
    manifest: dict[str, Any]


class DroppedBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    tenant: str = Field(min_length=1, max_length=MAX_NAME)
    run_id: Id = Field(min_length=1, max_length=MAX_ID)
    count: int = Field(ge=0, le=MAX_INT32, description="the recorder's total of this run's dropped steps so far")


class RecordedStepsBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    steps: list[RecordedStepBody] = Field(max_length=MAX_RECORDED_BATCH)
    dropped: list[DroppedBody] = Field(default_factory=list, max_length=MAX_DROPPED_ROWS)


class RecordedStepDoc(_Out):
    idempotency_key: str = Field(max_length=MAX_ID, description="`<run_id>/<step_id>`: a step sent again is stored once")
    request: AssemblyRequest = Field(description="the request the agent assembled, naming its policy revision; a "
                                                 "candidate's long `content` may be sent as `content_ref` (its "
                                                 "`content_hash`) in its place, once an earlier step of the tenant "
                                                 "carried it whole: the service puts it back from its store, or "
                                                 "refuses the step (409) when it no longer has it")
    manifest: ContextAssemblyManifest = Field(description="the manifest the agent's engine sealed for it")


class RecordedStepsDoc(_Out):
    """Steps an agent assembled in its own process (sdk.Recorder), and the totals of the steps its
    recorder dropped at its bounds, per run."""

    steps: list[RecordedStepDoc] = Field(max_length=MAX_RECORDED_BATCH)
    dropped: list[DroppedBody] = Field(default_factory=list, max_length=MAX_DROPPED_ROWS)


class RecordedOutcomeName(StrEnum):
    STORED = "stored"
    DUPLICATE = "duplicate"
    REFUSED = "refused"


class RecordedStepOut(_Out):
    idempotency_key: str
    outcome: RecordedOutcomeName = Field(description="`stored` (201), `duplicate` (200: stored before, the same body) "
                                                     "or `refused` (`status` 400/403/409 and `errors`; not stored)")
    status: int
    id: uuid.UUID | None
    html_url: str | None
    verification: VerificationStatus | None
    errors: list[str] | None


class RecordedStepsOut(_Out):
    results: list[RecordedStepOut] = Field(description="one per step, in the order sent")
    dropped: list[DroppedBody]


def recorded_steps_submit(request: Request) -> Response:
    """`POST recorded-steps/`: store a batch of locally assembled steps, one result per step."""
    payload = read_model(request, RecordedStepsBody, what="recorded steps")
    outcomes = services.recorded_steps_store(
        user=request.user, steps=[step.model_dump() for step in payload.steps],
        dropped=[row.model_dump() for row in payload.dropped])
    results = []
    for outcome in outcomes:
        job = outcome.job
        if job is not None:
            job.refresh_from_db(fields=["verification"])  # verified in-process on commit without REDIS_URL
        results.append({
            "idempotency_key": outcome.key, "outcome": outcome.outcome, "status": outcome.status,
            "id": str(job.id) if job else None, "html_url": assembly_html_url(job) if job else None,
            "verification": job.verification if job else None, "errors": outcome.errors,
        })
    return Response({"results": results, "dropped": [row.model_dump() for row in payload.dropped]})


class RecordedStepsApi(APIView):
    @extend_schema(
        request=RecordedStepsDoc,
        responses={200: RecordedStepsOut, 413: OpenApiTypes.OBJECT, 429: OpenApiTypes.OBJECT},
        summary="Record steps assembled in the agent's process (sdk.Recorder): each stored as a job of its run "
                "(`origin: recorded`) and verified by a worker's re-assembly",
        operation_id="recorded_steps_submit",
    )
    def post(self, request: Request) -> Response:
        return recorded_steps_submit(request)
