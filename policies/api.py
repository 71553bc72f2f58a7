"""REST API for policies: thin views that parse, call a service or selector, and serialize.

Bodies are validated by the engine's ContextPolicy model (errors name field paths); a policy
editor role (or admin) is required to write. Others' policies are 404.

Each view method only carries its OpenAPI description (`@extend_schema`) and calls a module-level
function named after its operation id, where the logic lives (mutmut does not mutate decorated
functions; see manifests/api.py).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from pydantic import BaseModel, ConfigDict, Field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ctxeng.accounts.models import Role
from ctxeng.accounts.selectors import roles_in, tenant_for_role, tenants_for
from ctxeng.engine import ContextPolicy
from ctxeng.engine.errors import validate
from ctxeng.engine.limits import MAX_INT32, MAX_NAME, MAX_NOTE
from ctxeng.server.errors import BadReference, Forbidden
from ctxeng.server.rest import query_int, read_json, read_model

from . import selectors, services
from .diffing import diff
from .models import Policy, PolicyRevision, RevisionStatus

# A revision's status as the schema publishes it, as its own component.
RevisionStatusName = StrEnum("PolicyRevisionStatus", {status.name: status.value for status in RevisionStatus})


class RevisionBody(BaseModel):
    """`{"body": <ContextPolicy>, "tenant": "<slug>"?}`; tenant defaults to your only editor tenant."""

    model_config = ConfigDict(extra="forbid", strict=True)  # strict: `true` is not 1
    body: dict[str, Any]
    tenant: str | None = Field(default=None, max_length=MAX_NAME)


class PublishBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # strict: `true` is not 1
    note: str = Field(default="", max_length=MAX_NOTE)


def revision_json(revision: PolicyRevision, *, with_body: bool = False) -> dict[str, Any]:
    data = {
        "policy_id": revision.policy.policy_id,
        "tenant": revision.policy.tenant.slug,
        "revision": revision.revision,
        "status": revision.status,
        "digest": revision.digest,
        "created_by": revision.created_by.get_username() if revision.created_by else None,
        "created_at": revision.created_at,
        "published_by": revision.published_by.get_username() if revision.published_by else None,
        "published_at": revision.published_at,
        "publish_note": revision.publish_note,
        "retired_at": revision.retired_at,
    }
    if with_body:
        data["body"] = revision.body
    return data


def policy_json(policy: Policy) -> dict[str, Any]:
    current = selectors.current_revision(policy)
    return {
        "policy_id": policy.policy_id,
        "tenant": policy.tenant.slug,
        "current_revision": current.revision if current else None,
        "current_digest": current.digest if current else None,
        "revisions": list(policy.revisions.order_by("revision").values_list("revision", flat=True)),
    }


def _require_editor(request: Request, policy: Policy) -> None:
    if Role.POLICY_EDITOR not in roles_in(request.user, policy.tenant):
        raise Forbidden(f"the policy_editor role is required in tenant {policy.tenant.slug!r}")


TENANT_PARAM = OpenApiParameter("tenant", str, description="tenant slug, when a policy id exists in several")
REVISION_RESPONSE = inline_serializer(
    "PolicyRevisionCreated",
    {
        "policy_id": serializers.CharField(),
        "revision": serializers.IntegerField(),
        "status": serializers.CharField(),
        "digest": serializers.CharField(),
    },
)


class PolicyRevisionBody(BaseModel):
    """The documented shape of RevisionBody (validated at run time by the engine's parse_policy)."""

    body: ContextPolicy
    tenant: str | None = Field(default=None, max_length=MAX_NAME)


REVISION_REQUEST = PolicyRevisionBody


class _Out(BaseModel):
    """A documented response shape (the views build the dicts; these publish them)."""

    model_config = ConfigDict(extra="forbid")


class PolicyOut(_Out):
    policy_id: str
    tenant: str
    current_revision: int | None
    current_digest: str | None
    revisions: list[int]


class PolicyListOut(_Out):
    results: list[PolicyOut]


class PolicyRevisionOut(_Out):
    policy_id: str
    tenant: str
    revision: int
    status: RevisionStatusName
    digest: str
    created_by: str | None
    created_at: datetime
    published_by: str | None
    published_at: datetime | None
    publish_note: str
    retired_at: datetime | None


class PolicyRevisionWithBodyOut(PolicyRevisionOut):
    body: ContextPolicy


class PolicyRevisionListOut(_Out):
    results: list[PolicyRevisionOut]


class PolicyChangeOut(_Out):
    path: str
    change: str = Field(description="added | removed | changed")
    from_: Any = Field(alias="from", description="the value in `from` (null when added)")
    to: Any = Field(description="the value in `to` (null when removed)")


class PolicyDiffOut(_Out):
    policy_id: str
    from_: int = Field(alias="from")
    to: int
    changes: list[PolicyChangeOut]


def policies_list(request: Request) -> Response:
    """`GET policies/`: the policies of the user's tenants."""
    return Response({"results": [policy_json(p) for p in selectors.policies_for(request.user)]})


class PolicyListApi(APIView):
    @extend_schema(responses={200: PolicyListOut}, summary="Policies in your tenants", operation_id="policies_list")
    def get(self, request: Request) -> Response:
        return policies_list(request)


def policies_revisions_list(request: Request, policy_id: str) -> Response:
    """`GET policies/{id}/revisions/`: the policy's revisions, in order."""
    policy = selectors.policy_get(request.user, policy_id, tenant=request.query_params.get("tenant"))
    revisions = policy.revisions.select_related("policy__tenant", "created_by", "published_by").order_by("revision")
    return Response({"results": [revision_json(r) for r in revisions]})


def policies_revisions_create(request: Request, policy_id: str) -> Response:
    """`POST policies/{id}/revisions/`: create a draft revision in the editor's tenant (201)."""
    payload = read_model(request, RevisionBody, what="policy")
    tenant = tenant_for_role(request.user, role=Role.POLICY_EDITOR, slug=payload.tenant)
    revision = services.policy_revision_create(
        tenant=tenant, body=payload.body, user=request.user, policy_id=policy_id
    )
    return Response(
        {"policy_id": policy_id, "revision": revision.revision, "status": revision.status, "digest": revision.digest},
        status=status.HTTP_201_CREATED,
    )


class RevisionListApi(APIView):
    @extend_schema(parameters=[TENANT_PARAM], responses={200: PolicyRevisionListOut}, summary="Revisions of a policy",
                   operation_id="policies_revisions_list")
    def get(self, request: Request, policy_id: str) -> Response:
        return policies_revisions_list(request, policy_id)

    @extend_schema(
        request=REVISION_REQUEST,
        responses={201: REVISION_RESPONSE, 400: OpenApiTypes.OBJECT, 409: OpenApiTypes.OBJECT},
        summary="Create a draft revision (body.policy.revision is the new number)",
        description="`body` is a ContextPolicy; see the ContextPolicy component schema.",
        operation_id="policies_revisions_create",
    )
    def post(self, request: Request, policy_id: str) -> Response:
        return policies_revisions_create(request, policy_id)


def policies_revisions_get(request: Request, policy_id: str, revision: int) -> Response:
    """`GET policies/{id}/revisions/{n}/`: one revision, with its body."""
    policy = selectors.policy_get(request.user, policy_id, tenant=request.query_params.get("tenant"))
    return Response(revision_json(selectors.revision_get(policy, revision), with_body=True))


def policies_revisions_update(request: Request, policy_id: str, revision: int) -> Response:
    """`PUT policies/{id}/revisions/{n}/`: replace a draft's body (an editor of the policy's tenant)."""
    policy = selectors.policy_get(request.user, policy_id, tenant=request.query_params.get("tenant"))
    _require_editor(request, policy)
    found = selectors.revision_get(policy, revision)
    payload = read_model(request, RevisionBody, what="policy")
    updated = services.policy_revision_update(revision=found, body=payload.body, user=request.user)
    return Response(revision_json(updated, with_body=True))


class RevisionDetailApi(APIView):
    @extend_schema(parameters=[TENANT_PARAM], responses={200: PolicyRevisionWithBodyOut}, summary="One revision, with its body",
                   operation_id="policies_revisions_get")
    def get(self, request: Request, policy_id: str, revision: int) -> Response:
        return policies_revisions_get(request, policy_id, revision)

    @extend_schema(
        request=REVISION_REQUEST,
        parameters=[TENANT_PARAM],
        responses={200: PolicyRevisionWithBodyOut, 409: OpenApiTypes.OBJECT},
        summary="Replace a draft's body (409 once published)",
        operation_id="policies_revisions_update",
    )
    def put(self, request: Request, policy_id: str, revision: int) -> Response:
        return policies_revisions_update(request, policy_id, revision)


def policies_revisions_publish(request: Request, policy_id: str, revision: int) -> Response:
    """`POST policies/{id}/revisions/{n}/publish/`: publish a draft (an editor of the policy's tenant)."""
    policy = selectors.policy_get(request.user, policy_id, tenant=request.query_params.get("tenant"))
    _require_editor(request, policy)
    found = selectors.revision_get(policy, revision)
    payload = validate(PublishBody, read_json(request, empty={}), what="publish request")
    published = services.policy_revision_publish(revision=found, user=request.user, note=payload.note)
    return Response(revision_json(published))


class RevisionPublishApi(APIView):
    @extend_schema(
        request=PublishBody,
        parameters=[TENANT_PARAM],
        responses={200: PolicyRevisionOut, 409: OpenApiTypes.OBJECT},
        summary="Publish a draft; the previous published revision is retired",
        operation_id="policies_revisions_publish",
    )
    def post(self, request: Request, policy_id: str, revision: int) -> Response:
        return policies_revisions_publish(request, policy_id, revision)


def policies_diff(request: Request, policy_id: str) -> Response:
    """`GET policies/{id}/diff/?from=A&to=B`: the structural diff of two revisions' bodies."""
    policy = selectors.policy_get(request.user, policy_id, tenant=request.query_params.get("tenant"))
    numbers = []
    for name in ("from", "to"):
        number = query_int(request, name, minimum=1, maximum=MAX_INT32)
        if number is None:
            raise BadReference(f"{name}: a revision number is required (?from=A&to=B)")
        numbers.append(number)
    a, b = (selectors.revision_get(policy, n) for n in numbers)
    return Response({"policy_id": policy_id, "from": a.revision, "to": b.revision, "changes": diff(a.body, b.body)})


class PolicyDiffApi(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("from", {"type": "integer", "minimum": 1, "maximum": MAX_INT32}, required=True),
            OpenApiParameter("to", {"type": "integer", "minimum": 1, "maximum": MAX_INT32}, required=True),
            TENANT_PARAM,
        ],
        responses={200: PolicyDiffOut},
        summary="Structural diff of two revisions' bodies: [{path, change, from, to}]",
        operation_id="policies_diff",
    )
    def get(self, request: Request, policy_id: str) -> Response:
        return policies_diff(request, policy_id)


def policies_validate(request: Request) -> Response:
    """`POST policies/validate/`: parse a policy body, writing nothing (a policy editor in some tenant)."""
    from ctxeng.engine import policy_digest, policy_warnings

    # Validating is part of editing: an agent's token has no business parsing policies.
    if not any(Role.POLICY_EDITOR in roles_in(request.user, t) for t in tenants_for(request.user)):
        raise Forbidden("the policy_editor role is required")
    policy = services.policy_parse(read_json(request))
    return Response({"valid": True, "policy_id": policy.policy.id, "revision": policy.policy.revision,
                     "digest": policy_digest(policy), "warnings": policy_warnings(policy)})


# Referenced so drf-spectacular publishes the engine's ContextPolicy JSON Schema as a component.
@extend_schema(
    request=ContextPolicy,
    responses={200: inline_serializer("PolicyValidated", {
        "valid": serializers.BooleanField(),
        "policy_id": serializers.CharField(),
        "revision": serializers.IntegerField(),
        "digest": serializers.CharField(),
        "warnings": serializers.ListField(child=serializers.CharField(), help_text="what the valid policy leaves unchecked, as `path: message`"),
    })},
    summary="Validate a policy body (no write; the policy_editor role in some tenant)",
)
class PolicyValidateApi(APIView):
    @extend_schema(operation_id="policies_validate")
    def post(self, request: Request) -> Response:
        return policies_validate(request)
