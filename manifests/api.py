"""REST API for assemblies, item decisions and artifacts: thin views over services and selectors.

Assembly requests are validated by the engine's AssemblyRequest model (400 with field paths);
the OpenAPI schema references the engine's JSON Schema instead of re-declaring it.
"""

from __future__ import annotations

from typing import Annotated, Any

from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from pydantic import BaseModel, ConfigDict, Field
from rest_framework import status
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ctxeng.accounts.models import Role
from ctxeng.accounts.selectors import roles_in, tenant_for_role
from ctxeng.engine import AssemblyRequest, ContextAssemblyManifest
from ctxeng.engine.limits import MAX_ID, MAX_INT32, MAX_ITEM_ID, MAX_NAME
from ctxeng.errors import Conflict, Forbidden
from ctxeng.rest import ApiError, read_json, read_model
from ctxeng.telemetry import traceparent_header

from . import selectors, services
from .models import Artifact, AssemblyJob, Decision, JobStatus, Manifest, UsageReport


def assembly_html_url(job: AssemblyJob) -> str:
    return f"/assemblies/{job.id}/"


def run_html_url(run_id: str) -> str:
    return f"/runs/{run_id}/"


def job_json(job: AssemblyJob) -> dict[str, Any]:
    revision = job.policy_revision
    manifest: Manifest | None = getattr(job, "manifest", None) if job.is_final else None
    return {
        "id": str(job.id),
        "status": job.status,
        "run_id": job.run.run_id,
        "step_id": job.step_id,
        "tenant": job.tenant.slug,
        "policy": {"id": revision.policy.policy_id, "revision": revision.revision, "digest": revision.digest},
        "url": reverse("api-assembly", args=[job.id]),
        "html_url": assembly_html_url(job),
        "run_html_url": run_html_url(job.run.run_id),
        "manifest_url": reverse("api-assembly-manifest", args=[job.id]) if manifest else None,
        "input_url": reverse("api-assembly-input", args=[job.id]) if manifest and job.status == JobStatus.READY else None,
        "assembly_id": manifest.assembly_id if manifest else None,
        "content_purged_at": manifest.content_purged_at if manifest else None,
        "error": job.error or None,
        "attempts": job.attempts,
        "created_at": job.created_at,
        "finished_at": job.finished_at,
    }


JOB_ID = OpenApiParameter("job_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="the assembly's id")


def _sealed_manifest(job: AssemblyJob) -> Manifest:
    manifest = selectors.job_manifest(job)
    if manifest is None:
        if job.status == JobStatus.FAILED:
            raise Conflict(f"assembly {job.id} failed: {job.error}")
        raise Conflict(f"assembly {job.id} is {job.status}; no manifest yet")
    return manifest


class AssemblyListApi(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("run_id", str),
            OpenApiParameter("status", str, enum=JobStatus.values),
            OpenApiParameter("policy", str, description="policy id"),
        ],
        responses={200: OpenApiTypes.OBJECT},
        summary="Assembly jobs in your tenants",
        operation_id="assemblies_list",
    )
    def get(self, request: Request) -> Response:
        wanted_status = request.query_params.get("status")
        if wanted_status is not None and wanted_status not in JobStatus.values:
            raise ApiError(status.HTTP_400_BAD_REQUEST,
                           f"status: expected one of {', '.join(JobStatus.values)}, got {wanted_status!r}")
        jobs = selectors.jobs_for(
            request.user,
            run_id=request.query_params.get("run_id"),
            status=wanted_status,
            policy=request.query_params.get("policy"),
        )
        paginator = LimitOffsetPagination()
        page = paginator.paginate_queryset(jobs, request, view=self)
        return paginator.get_paginated_response([job_json(job) for job in page])

    @extend_schema(
        request=AssemblyRequest,
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER,
                                     description=f"at most {MAX_ID} characters"),
                    OpenApiParameter("traceparent", str, OpenApiParameter.HEADER,
                                     description="W3C trace context: the assembly's span becomes a child of "
                                                 "this one (OpenTelemetry export on; a malformed value is ignored)")],
        responses={202: OpenApiTypes.OBJECT, 200: OpenApiTypes.OBJECT, 400: OpenApiTypes.OBJECT,
                   403: OpenApiTypes.OBJECT, 409: OpenApiTypes.OBJECT, 413: OpenApiTypes.OBJECT},
        summary="Submit an assembly job (202); poll its url",
    )
    def post(self, request: Request) -> Response:
        key = request.headers.get("Idempotency-Key")
        if key is not None and len(key) > MAX_ID:
            raise ApiError(status.HTTP_400_BAD_REQUEST,
                           f"Idempotency-Key: {len(key)} characters, more than the limit {MAX_ID}")
        data = read_json(request)
        job, created = services.assembly_job_submit(user=request.user, data=data, idempotency_key=key,
                                                    traceparent=traceparent_header(request.headers.get("traceparent")))
        job.refresh_from_db()
        body = {"id": str(job.id), "status": job.status, "url": reverse("api-assembly", args=[job.id]),
                "html_url": assembly_html_url(job)}
        return Response(body, status=status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK)


class AssemblyDetailApi(APIView):
    @extend_schema(parameters=[JOB_ID], responses={200: OpenApiTypes.OBJECT}, summary="One assembly job")
    def get(self, request: Request, job_id: str) -> Response:
        return Response(job_json(selectors.job_get(request.user, job_id)))


class AssemblyManifestApi(APIView):
    @extend_schema(parameters=[JOB_ID], responses={200: ContextAssemblyManifest, 409: OpenApiTypes.OBJECT},
                   summary="The sealed manifest")
    def get(self, request: Request, job_id: str) -> Response:
        manifest = _sealed_manifest(selectors.job_get(request.user, job_id))
        document = selectors.manifest_document(manifest)
        usage = UsageReport.objects.filter(manifest=manifest).only("input_tokens").first()
        if usage is not None and isinstance(document.get("budget"), dict):
            # The sealed row never changes; the served copy carries the provider's reported count.
            document = {**document, "budget": {**document["budget"], "actual_input_tokens": usage.input_tokens}}
        return Response(document)


class AssemblyInputApi(APIView):
    @extend_schema(parameters=[JOB_ID], responses={200: OpenApiTypes.OBJECT, 409: OpenApiTypes.OBJECT,
                                                   410: OpenApiTypes.OBJECT},
                   summary="The serialized provider input (409 when blocked, 410 once its content was purged)")
    def get(self, request: Request, job_id: str) -> Response:
        job = selectors.job_get(request.user, job_id)
        manifest = _sealed_manifest(job)
        if manifest.content_purged_at is not None:
            raise ApiError(status.HTTP_410_GONE, f"assembly {job.id}: content purged at "
                           f"{manifest.content_purged_at.isoformat()} (retention); the manifest keeps its hashes")
        if manifest.payload_packed is None:
            reason = (selectors.manifest_document(manifest, sections=("assembly",)).get("assembly") or {}).get("blocked_reason")
            raise Conflict(f"assembly {job.id} is {manifest.status} ({reason}); there is no model input")
        return Response(selectors.manifest_payload(manifest))


class AssemblyRequestApi(APIView):
    @extend_schema(parameters=[JOB_ID], responses={200: AssemblyRequest},
                   summary="The request as submitted (rebuilt from the content store; candidates lose their "
                           "content once the manifest's content is purged)")
    def get(self, request: Request, job_id: str) -> Response:
        return Response(selectors.job_request(selectors.job_get(request.user, job_id)))


class UsageBody(BaseModel):
    """The provider's reported usage for the call made with this assembly's input."""

    model_config = ConfigDict(extra="forbid", strict=True)  # strict: `true` is not 1
    input_tokens: int = Field(ge=0, le=MAX_INT32)
    cached_tokens: int = Field(default=0, ge=0, le=MAX_INT32)
    output_tokens: int = Field(default=0, ge=0, le=MAX_INT32)


class AssemblyUsageApi(APIView):
    @extend_schema(request=UsageBody, parameters=[JOB_ID], responses={200: OpenApiTypes.OBJECT, 409: OpenApiTypes.OBJECT},
                   summary="Report the provider's actual token usage (stored beside the estimate)")
    def post(self, request: Request, job_id: str) -> Response:
        job = selectors.job_get(request.user, job_id)
        if Role.AGENT not in roles_in(request.user, job.tenant):
            raise Forbidden(f"the agent role is required in tenant {job.tenant.slug!r}")
        payload = read_model(request, UsageBody, what="usage report")
        manifest = _sealed_manifest(job)
        if manifest.status != JobStatus.READY:
            raise Conflict(f"assembly {job.id} is {manifest.status}; no model call was made with it")
        report = services.usage_report_record(manifest=manifest, user=request.user, **payload.model_dump())
        return Response({
            "id": str(job.id),
            "input_tokens": report.input_tokens,
            "cached_tokens": report.cached_tokens,
            "output_tokens": report.output_tokens,
            "estimated_input_tokens": report.estimated_input_tokens,
            "estimate_error": report.estimated_input_tokens - report.input_tokens,
            "reported_at": report.reported_at,
        })


class ItemDecisionsApi(APIView):
    @extend_schema(parameters=[OpenApiParameter("decision", str, enum=Decision.values)],
                   responses={200: OpenApiTypes.OBJECT},
                   summary="Every manifest where an item appeared, with the decision and reason")
    def get(self, request: Request, item_id: str) -> Response:
        rows = selectors.item_decisions(request.user, item_id)
        decision = request.query_params.get("decision")
        if decision is not None and decision not in Decision.values:
            raise ApiError(status.HTTP_400_BAD_REQUEST,
                           f"decision: expected one of {', '.join(Decision.values)}, got {decision!r}")
        if decision:
            rows = rows.filter(decision=decision)
        paginator = LimitOffsetPagination()
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response([
            {
                "item_id": row.item_id,
                "assembly": str(row.manifest.job_id),
                "assembly_id": row.manifest.assembly_id,
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


class ArtifactBody(BaseModel):
    """An externalized object; a candidate re-injects it with `artifact_ref: {artifact_id, revision}`."""

    model_config = ConfigDict(extra="forbid", strict=True)  # strict: `true` is not 1
    artifact_id: str = Field(min_length=1, max_length=MAX_ITEM_ID)
    revision: int | Annotated[str, Field(min_length=1, max_length=MAX_NAME)]
    kind: str = Field(min_length=1, max_length=MAX_NAME)
    content: str
    content_hash: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")
    writer: str = Field(min_length=1, max_length=MAX_ID)
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


class ArtifactListApi(APIView):
    @extend_schema(parameters=[OpenApiParameter("artifact_id", str)], responses={200: OpenApiTypes.OBJECT},
                   summary="Artifacts in your tenants")
    def get(self, request: Request) -> Response:
        artifacts = selectors.artifacts_for(request.user, artifact_id=request.query_params.get("artifact_id"))
        paginator = LimitOffsetPagination()
        page = paginator.paginate_queryset(artifacts, request, view=self)
        return paginator.get_paginated_response([artifact_json(a) for a in page])

    @extend_schema(request=ArtifactBody, responses={201: OpenApiTypes.OBJECT, 200: OpenApiTypes.OBJECT,
                                                   409: OpenApiTypes.OBJECT},
                   summary="Store an artifact revision (re-posting identical content is a no-op)")
    def post(self, request: Request) -> Response:
        payload = read_model(request, ArtifactBody, what="artifact")
        tenant = tenant_for_role(request.user, role=Role.AGENT, slug=payload.tenant)
        artifact, created = services.artifact_create(
            user=request.user, tenant=tenant, **payload.model_dump(exclude={"tenant"})
        )
        return Response(artifact_json(artifact), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class RunCloseBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    tenant: str | None = Field(default=None, max_length=MAX_NAME, description="defaults to your only tenant with the agent role")


class RunCloseApi(APIView):
    @extend_schema(request=RunCloseBody, responses={200: OpenApiTypes.OBJECT, 404: OpenApiTypes.OBJECT},
                   summary="Close a run: its task closes, later steps are blocked with a task_closed event")
    def post(self, request: Request, run_id: str) -> Response:
        payload = read_model(request, RunCloseBody, what="run") if request.body else RunCloseBody()
        tenant = tenant_for_role(request.user, role=Role.AGENT, slug=payload.tenant)
        run = services.run_close(user=request.user, tenant=tenant, run_id=run_id)
        return Response({"run_id": run.run_id, "tenant": tenant.slug, "closed_at": run.closed_at,
                         "html_url": run_html_url(run.run_id)})
