"""One validation edge: every limit of the database and of the engine is a limit of the API's request
models, refused with a 400 that names the field before anything is stored or queued (issue 12).

Two walks keep the table below complete: every CharField and IntegerField of the apps' models is
either fed by a request field with an edge case here (whose limit is the column's size) or is
derived by the service, and every upper bound a request model declares from `ctxeng.engine.limits`
has an edge case. Each case sends the value one past its limit (400 naming the field, no row
written) and exactly at it (not refused for its size; a job it starts ends ready or blocked, so
the column holds what the model admits, on SQLite and on PostgreSQL).
"""

from __future__ import annotations

import copy
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from annotated_types import Le, MaxLen
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ctxeng.engine.limits import MAX_ID, MAX_INT32, MAX_ITEM_ID, MAX_JSON_DEPTH, MAX_NAME, MAX_NOTE

URL = "/api/v1/assemblies/"
EDGE_LIMITS = {MAX_ID, MAX_ITEM_ID, MAX_NAME, MAX_NOTE, MAX_INT32}


@dataclass
class Env:
    agent: Any
    editor: Any
    submit: Callable[..., Any]
    request: dict[str, Any]
    policy: dict[str, Any]
    ready_job: str


@dataclass(frozen=True)
class Case:
    """`send(env, value)` puts `value` in request field `model.field`; a 400 names `path`."""

    model: str
    field: str
    limit: int
    path: str
    send: Callable[[Env, Any], Any]
    integer: bool = False  # a count bounded by `limit`, not a string of that length

    @property
    def id(self) -> str:
        return f"{self.model}.{self.field}"

    def value(self, size: int) -> Any:
        return size if self.limit == MAX_INT32 or self.integer else "x" * size


# --------------------------------------------------------------------------- how each field is sent


def _assembly(mutate: Callable[[dict[str, Any], Any], None]) -> Callable[[Env, Any], Any]:
    def send(env: Env, value: Any) -> Any:
        body = copy.deepcopy(env.request)
        mutate(body, value)
        return env.submit(env.agent, body)

    return send


def _set(path: str) -> Callable[[dict[str, Any], Any], None]:
    def mutate(body: dict[str, Any], value: Any) -> None:
        *parents, last = path.split(".")
        for key in parents:
            body = body[key]
        body[last] = value

    return mutate


def _extra_candidate(**fields: Any) -> Callable[[dict[str, Any], Any], None]:
    """Append a copy of an ordinary candidate (candidates[28]) with `fields` set; `value` fills VALUE."""

    def mutate(body: dict[str, Any], value: Any) -> None:
        item = copy.deepcopy(body["candidates"][12])
        item["item_id"] = "edge-item"
        for name, given in fields.items():
            item[name] = value if given is VALUE else given
        if isinstance(fields.get("artifact_ref"), dict):
            item["artifact_ref"] = {k: value if v is VALUE else v for k, v in fields["artifact_ref"].items()}
        body["candidates"].append(item)

    return mutate


VALUE = object()


def _checkpoint(body: dict[str, Any], value: Any) -> None:
    body["checkpoint"] = {"summary_id": value, "goal": "g", "current_stage": "s", "input_item_ids": ["task-goal"]}


def _idempotency_key(env: Env, value: Any) -> Any:
    return env.submit(env.agent, env.request, key=value)


def _policy(mutate: Callable[[dict[str, Any], Any], None], *, url_id: bool = False) -> Callable[[Env, Any], Any]:
    def send(env: Env, value: Any) -> Any:
        body = copy.deepcopy(env.policy)
        body["policy"]["revision"] = 4
        mutate(body, value)
        policy_id = body["policy"]["id"]
        return env.editor.post(f"/api/v1/policies/{policy_id}/revisions/", {"body": body}, format="json")

    return send


def _first_partition_named(body: dict[str, Any], value: Any) -> None:
    partitions = body["budget"]["partitions"]
    first = next(iter(partitions))
    body["budget"]["partitions"] = {(value if name == first else name): p for name, p in partitions.items()}


def _revision_tenant(env: Env, value: Any) -> Any:
    body = copy.deepcopy(env.policy)
    body["policy"]["revision"] = 4
    return env.editor.post("/api/v1/policies/source-research/revisions/", {"body": body, "tenant": value},
                           format="json")


def _publish_note(env: Env, value: Any) -> Any:
    return env.editor.post("/api/v1/policies/source-research/revisions/3/publish/", {"note": value}, format="json")


ARTIFACT = {"artifact_id": "notes", "revision": "1", "kind": "evidence", "content": "x", "writer": "agent",
            "scope": "tenant-x/project-y"}


def _artifact(field: str) -> Callable[[Env, Any], Any]:
    def send(env: Env, value: Any) -> Any:
        return env.agent.post("/api/v1/artifacts/", {**ARTIFACT, field: value}, format="json")

    return send


def _usage(field: str) -> Callable[[Env, Any], Any]:
    def send(env: Env, value: Any) -> Any:
        body = {"input_tokens": 10, field: value}
        return env.agent.post(f"{URL}{env.ready_job}/usage/", body, format="json")

    return send


def _runtime_destination(body: dict[str, Any], value: Any) -> None:
    body.setdefault("runtime_state", {})["publish_destination"] = value


def _approved_by(kind: str = "review_decision", source_type: str = "review_service", producer: str = "review-desk"):
    """`stages.publishing` requiring a review decision from an approver (issue 39's clause)."""
    def mutate(body: dict[str, Any], value: Any) -> None:
        source = {"source_types": [source_type if source_type is not VALUE else value],
                  "producers": [producer if producer is not VALUE else value]}
        body["stages"] = {"publishing": {"require": ["review_decision"],
                                         "approved_by": {(value if kind is VALUE else kind): source}}}

    return mutate


def _upgrade(**fields: Any) -> Callable[[dict[str, Any], Any], None]:
    """One `upgrades` record (seed §8), with `VALUE` in the field under test."""
    def mutate(body: dict[str, Any], value: Any) -> None:
        condition = {"shows": "*", "at_least": 1, "of_last": 1}
        condition.update({k[len("revoke_when."):]: value for k, v in fields.items() if k.startswith("revoke_when.")})
        record = {"mechanism": "admission.min_relevance", "addresses": ["assembly-1"], "failure": "f",
                  "shows": "*", "new_failure_modes": "n", "cost": "c", "revocation": "r", "revoke_when": condition}
        record.update({k: value for k in fields if not k.startswith("revoke_when.")})
        body["upgrades"] = [record]

    return mutate


def _when_present(body: dict[str, Any], value: Any) -> None:
    body.setdefault("resident", {})["when_present"] = [value]


def _run_close_tenant(env: Env, value: Any) -> Any:
    return env.agent.post("/api/v1/runs/run-42/close/", {"tenant": value}, format="json")


CASES = [
    Case("AssemblyRequest", "run_id", MAX_ID, "run_id", _assembly(_set("run_id"))),
    Case("AssemblyRequest", "step_id", MAX_ID, "step_id", _assembly(_set("step_id"))),
    Case("header", "Idempotency-Key", MAX_ID, "Idempotency-Key", _idempotency_key),
    Case("PolicyRef", "id", MAX_ID, "policy.id", _assembly(_set("policy.id"))),
    Case("PolicyRef", "revision", MAX_INT32, "policy.revision", _assembly(_set("policy.revision"))),
    Case("Principal", "tenant", MAX_NAME, "principal.tenant", _assembly(_set("principal.tenant"))),
    Case("ModelSpec", "context_limit", MAX_INT32, "model.context_limit", _assembly(_set("model.context_limit"))),
    Case("ContextItem", "item_id", MAX_ITEM_ID, "candidates[28].item_id", _assembly(_extra_candidate(item_id=VALUE))),
    Case("ContextItem", "kind", MAX_NAME, "candidates[28].kind", _assembly(_extra_candidate(kind=VALUE))),
    Case("ContextItem", "source_type", MAX_NAME, "candidates[28].source_type",
         _assembly(_extra_candidate(source_type=VALUE))),
    Case("ArtifactRef", "artifact_id", MAX_ITEM_ID, "candidates[28].artifact_ref.artifact_id",
         _assembly(_extra_candidate(artifact_ref={"artifact_id": VALUE, "revision": "1"}))),
    Case("ArtifactRef", "revision", MAX_NAME, "candidates[28].artifact_ref.revision",
         _assembly(_extra_candidate(artifact_ref={"artifact_id": "notes", "revision": VALUE}))),
    Case("ToolCall", "result_item_id", MAX_ITEM_ID, "tool_calls[0].result_item_id",
         _assembly(lambda body, value: body["tool_calls"][0].update(result_item_id=value))),
    Case("CheckpointState", "summary_id", MAX_ITEM_ID, "checkpoint.summary_id", _assembly(_checkpoint)),
    Case("PolicyHeader", "id", MAX_ID, "policy.id", _policy(_set("policy.id"))),
    Case("PolicyHeader", "revision", MAX_INT32, "policy.revision", _policy(_set("policy.revision"))),
    Case("BudgetPolicy", "partitions", MAX_NAME, "budget.partitions", _policy(_first_partition_named)),
    Case("ContextPolicy", "stages", MAX_NAME, "stages", _policy(lambda body, value: body.update(stages={value: {}}))),
    Case("StagePolicy", "require", MAX_NAME, "stages.publishing.require[0]",
         _policy(lambda body, value: body.update(stages={"publishing": {"require": [value]}}))),
    Case("StagePolicy", "not_relevant", MAX_NAME, "stages.drafting.not_relevant[0]",
         _policy(lambda body, value: body.update(stages={"drafting": {"not_relevant": [value]}}))),
    Case("TrustPolicy", "producers", MAX_NAME, "trust.producers",
         _policy(lambda body, value: body["trust"].update(producers={value: ["runtime/v1"]}))),
    Case("RevisionBody", "tenant", MAX_NAME, "tenant", _revision_tenant),
    Case("PublishBody", "note", MAX_NOTE, "note", _publish_note),
    Case("ArtifactBody", "artifact_id", MAX_ITEM_ID, "artifact_id", _artifact("artifact_id")),
    Case("ArtifactBody", "revision", MAX_NAME, "revision", _artifact("revision")),
    Case("ArtifactBody", "kind", MAX_NAME, "kind", _artifact("kind")),
    Case("ArtifactBody", "writer", MAX_ID, "writer", _artifact("writer")),
    Case("ArtifactBody", "scope", MAX_ITEM_ID, "scope", _artifact("scope")),
    Case("ArtifactBody", "tenant", MAX_NAME, "tenant", _artifact("tenant")),
    Case("UsageBody", "input_tokens", MAX_INT32, "input_tokens", _usage("input_tokens")),
    Case("UsageBody", "cached_tokens", MAX_INT32, "cached_tokens", _usage("cached_tokens")),
    Case("UsageBody", "output_tokens", MAX_INT32, "output_tokens", _usage("output_tokens")),
    Case("RunCloseBody", "tenant", MAX_NAME, "tenant", _run_close_tenant),
    Case("RuntimeState", "publish_destination", MAX_NAME, "runtime_state.publish_destination",
         _assembly(_runtime_destination)),
    Case("StagePolicy", "approved_by", MAX_NAME, "stages.publishing.approved_by", _policy(_approved_by(kind=VALUE))),
    Case("ApprovalSource", "source_types", MAX_NAME, "stages.publishing.approved_by.review_decision.source_types[0]",
         _policy(_approved_by(source_type=VALUE))),
    Case("ApprovalSource", "producers", MAX_NAME, "stages.publishing.approved_by.review_decision.producers[0]",
         _policy(_approved_by(producer=VALUE))),
    Case("ResidentPolicy", "when_present", MAX_NAME, "resident.when_present[0]", _policy(_when_present)),
    Case("UpgradeRecord", "shows", 2 * MAX_NAME, "upgrades[0].shows", _policy(_upgrade(shows=VALUE))),
    Case("RevocationCondition", "shows", 2 * MAX_NAME, "upgrades[0].revoke_when.shows",
         _policy(_upgrade(**{"revoke_when.shows": VALUE}))),
    Case("RevocationCondition", "at_least", 10_000, "upgrades[0].revoke_when.at_least",
         _policy(_upgrade(**{"revoke_when.at_least": VALUE})), integer=True),
    Case("RevocationCondition", "of_last", 10_000, "upgrades[0].revoke_when.of_last",
         _policy(_upgrade(**{"revoke_when.of_last": VALUE})), integer=True),
]
CASE_IDS = {case.id for case in CASES}

# Every size-limited column of the apps: the request field(s) whose edge case covers it, or why
# no request field reaches it (derived by the service or the engine, or written by a command).
COLUMNS: dict[str, list[str] | str] = {
    "accounts.Tenant.slug": ["Principal.tenant", "ArtifactBody.tenant", "RunCloseBody.tenant", "RevisionBody.tenant"],
    "accounts.Tenant.name": "written by the issue_token command, never by the API",
    "accounts.Profile.time_display": "one of the TimeDisplay choices, set by the dashboard's time switch (checked against them)",
    "accounts.Membership.role": "one of the Role choices, written by the issue_token command",
    "manifests.Run.run_id": ["AssemblyRequest.run_id"],
    "manifests.Run.recorded_dropped": "a count of dropped recorded steps, bounded at the edge by the recorded-steps body's "
                                      "`dropped[].count` (ge=0, le=MAX_INT32), and only ever raised to it",
    "manifests.AssemblyJob.origin": "one of the Origin choices (remote, recorded), set by the service, never by a body",
    "manifests.AssemblyJob.verification": "one of the Verification choices, set by the verification task, never by a body",
    "manifests.AssemblyJob.step_id": ["AssemblyRequest.step_id"],
    "manifests.AssemblyJob.request_digest": "a sha256: digest of the body",
    "manifests.AssemblyJob.idempotency_key": ["header.Idempotency-Key"],
    "manifests.AssemblyJob.status": "one of the JobStatus choices",
    "manifests.AssemblyJob.attempts": "counted by the claim, at most CTXENG_MAX_ATTEMPTS",
    "manifests.AssemblyJob.claimed_by": "the worker's host:pid",
    "manifests.AssemblyJob.traceparent": "a well-formed W3C traceparent, 55 characters, or empty (traceparent_header)",
    "manifests.Manifest.assembly_id": "'assembly-' and 16 hex digits (engine seal)",
    "manifests.Manifest.status": "ready or blocked",
    "manifests.Manifest.assembly_input_hash": "a sha256: digest",
    "manifests.Manifest.serialized_model_input_hash": "a sha256: digest",
    "manifests.Manifest.estimated_input_tokens": "counted by the engine, bounded by the body size",
    "manifests.Manifest.usable_input": ["ModelSpec.context_limit"],
    "manifests.ManifestItem.position": "the item's index in the manifest, bounded by the item count",
    "manifests.ItemDecision.digest": "a sha256: digest of the packed record",
    "manifests.ItemDecision.item_id": ["ContextItem.item_id", "CheckpointState.summary_id"],
    "manifests.ItemDecision.decision": "included or excluded",
    "manifests.ItemDecision.hard_gate": "a HardGate value",
    "manifests.ItemDecision.partition": ["BudgetPolicy.partitions"],
    "manifests.ItemDecision.zone": "a Zone value",
    "manifests.ItemDecision.tokens": "counted by the engine, bounded by the body size",
    "manifests.ItemDecision.trust": "a Trust value",
    "manifests.ItemDecision.role": "a Role value",
    "manifests.ItemDecision.kind": ["ContextItem.kind"],
    "manifests.ItemDecision.source_type": ["ContextItem.source_type"],
    "manifests.ItemDecision.epoch": "the content purge epoch, counted by the purge",
    "manifests.ItemDecision.label": "derived at seal by manifests.item_labels, clipped to LABEL_CHARS",
    "content.Content.digest": "a sha256: digest of the blob",
    "content.Content.kind": "text or json",
    "content.Content.size": "the blob's bytes, bounded by the body size",
    "content.Content.location": "db or s3",
    "content.Content.encoding": "'', zlib or zlib-r1",
    "content.Content.epoch": "the content purge epoch, counted by the purge",
    "content.ContentEpoch.value": "counted by the purge",
    "manifests.Artifact.artifact_id": ["ArtifactBody.artifact_id"],
    "manifests.Artifact.revision": ["ArtifactBody.revision"],
    "manifests.Artifact.kind": ["ArtifactBody.kind"],
    "manifests.Artifact.content_hash": "a sha256: digest (ArtifactBody.content_hash is a pattern)",
    "manifests.Artifact.writer": ["ArtifactBody.writer"],
    "manifests.Artifact.scope": ["ArtifactBody.scope"],
    "manifests.UsageReport.input_tokens": ["UsageBody.input_tokens"],
    "manifests.UsageReport.cached_tokens": ["UsageBody.cached_tokens"],
    "manifests.UsageReport.output_tokens": ["UsageBody.output_tokens"],
    "manifests.UsageReport.estimated_input_tokens": "copied from the manifest",
    "policies.Policy.policy_id": ["PolicyHeader.id", "PolicyRef.id"],
    "policies.PolicyRevision.revision": ["PolicyHeader.revision", "PolicyRef.revision"],
    "policies.PolicyRevision.digest": "a sha256: digest",
    "policies.PolicyRevision.status": "one of the RevisionStatus choices",
    "policies.ImpactPreview.digest": "the draft's sha256: digest",
    "policies.ImpactPreview.status": "one of the PreviewStatus choices",
    "policies.ImpactPreview.total": "how many recorded requests are replayed (a small fixed number)",
    "policies.ImpactPreview.done": "counted while replaying, at most total",
    "policies.ImpactPreview.stopped_reason": "written by the preview job (cancelled, time limit)",
    "audit.AuditEvent.action": "one of the AuditAction choices",
    "audit.AuditEvent.actor_name": "a username (150) or cli:<os user>",
    "audit.AuditEvent.revision": ["PolicyHeader.revision"],
    "audit.AuditEvent.subject": "a username, or a run_id (MAX_ID)",
    "audit.AuditEvent.digest": "a sha256: digest or fingerprint",
}


# --------------------------------------------------------------------------- the walks


def _size_limited_columns() -> dict[str, int | None]:
    from django.apps import apps
    from django.db import models

    columns = {}
    for label in ("accounts", "manifests", "policies", "audit", "content"):
        for model in apps.get_app_config(label).get_models():
            for field in model._meta.concrete_fields:
                if isinstance(field, models.CharField):
                    columns[f"{label}.{model.__name__}.{field.name}"] = field.max_length
                elif isinstance(field, models.IntegerField) and not isinstance(field, models.AutoField):
                    columns[f"{label}.{model.__name__}.{field.name}"] = MAX_INT32
    return columns


def _declared_limits(model: type[BaseModel], seen: set[type] | None = None) -> set[tuple[str, int]]:
    """(`Model.field`, limit) for every upper bound from ctxeng.engine.limits a model declares,
    nested models, list items, dict keys and union members included."""
    seen = set() if seen is None else seen
    seen.add(model)
    found: set[tuple[str, int]] = set()

    def bounds(owner: str, metadata: Any) -> None:
        for item in metadata:
            if isinstance(item, FieldInfo):
                bounds(owner, item.metadata)
            elif isinstance(item, MaxLen) and item.max_length in EDGE_LIMITS:
                found.add((owner, item.max_length))
            elif isinstance(item, Le) and item.le in EDGE_LIMITS:
                found.add((owner, item.le))

    def walk(owner: str, annotation: Any) -> None:
        if typing.get_origin(annotation) is typing.Annotated:
            base, *metadata = typing.get_args(annotation)
            bounds(owner, metadata)
            walk(owner, base)
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in seen:
                found.update(_declared_limits(annotation, seen))
        else:
            for arg in typing.get_args(annotation):
                walk(owner, arg)

    for name, info in model.model_fields.items():
        owner = f"{model.__name__}.{name}"
        bounds(owner, info.metadata)
        walk(owner, info.annotation)
    return found


def _request_models() -> list[type[BaseModel]]:
    from ctxeng.engine import AssemblyRequest, ContextPolicy
    from manifests.api import ArtifactBody, RunCloseBody, UsageBody
    from policies.api import PublishBody, RevisionBody

    return [AssemblyRequest, ContextPolicy, UsageBody, ArtifactBody, RunCloseBody, RevisionBody, PublishBody]


def test_every_size_limited_column_is_fed_by_a_field_with_an_edge_case_or_derived():
    limits = {case.id: case.limit for case in CASES}
    columns = _size_limited_columns()
    assert set(columns) == set(COLUMNS), "classify every new column in COLUMNS"
    for column, fed_by in COLUMNS.items():
        if isinstance(fed_by, str):
            continue
        for field in fed_by:
            assert field in limits, f"{column}: no edge case for {field}"
            assert limits[field] == columns[column], f"{column} holds {columns[column]}, {field} admits {limits[field]}"


def test_every_limit_a_request_model_declares_has_an_edge_case():
    declared = set()
    for model in _request_models():
        declared |= _declared_limits(model)
    cases = {(case.id, case.limit) for case in CASES if case.model != "header"}
    assert declared == cases


# --------------------------------------------------------------------------- the edge itself


def _rows() -> dict[str, int]:
    from django.apps import apps

    return {
        f"{label}.{model.__name__}": model.objects.count()
        for label in ("accounts", "manifests", "policies", "audit")
        for model in apps.get_app_config(label).get_models()
    }


@pytest.fixture
def env(published_policy, agent_api, editor_api, submit, example_request, example_policy_body, settings) -> Env:
    settings.CTXENG_THROTTLE_AGENT = ""
    response = submit(agent_api, example_request)
    assert response.status_code == 202
    assert agent_api.post("/api/v1/artifacts/", ARTIFACT, format="json").status_code == 201
    return Env(agent_api, editor_api, submit, example_request, example_policy_body, response.json()["id"])


SIZE_WORDS = ("at most", "less than or equal to", "more than the limit")


def _size_errors(response: Any, case: Case) -> list[str]:
    """The errors that refuse the field for its size (pydantic's words, or the edge's own)."""
    errors = response.json().get("errors", [])
    return [e for e in errors if e.startswith(case.path) and any(word in e for word in SIZE_WORDS)]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_one_past_the_limit_is_a_400_naming_the_field_and_nothing_is_stored(case, env):
    before = _rows()
    response = case.send(env, case.value(case.limit + 1))
    assert response.status_code == 400, (response.status_code, response.content[:500])
    assert _size_errors(response, case), response.json()
    assert _rows() == before


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_exactly_at_the_limit_is_not_refused_for_its_size_and_a_job_it_starts_finishes(case, env):
    response = case.send(env, case.value(case.limit))
    assert response.status_code < 500, response.content[:500]
    if response.status_code >= 400:
        assert not _size_errors(response, case), response.json()
    if response.status_code == 202:
        job = env.agent.get(response.json()["url"]).json()
        assert job["status"] in ("ready", "blocked"), job


def test_an_item_id_at_the_limit_is_stored_in_its_manifest_row(env):
    from manifests.models import ManifestItem

    body = copy.deepcopy(env.request)
    _extra_candidate(item_id=VALUE)(body, "i" * MAX_ITEM_ID)
    response = env.submit(env.agent, body)
    assert env.agent.get(response.json()["url"]).json()["status"] == "ready"
    assert ManifestItem.objects.filter(item_id="i" * MAX_ITEM_ID).count() == 1


# --------------------------------------------------------------------------- JSON itself


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


def _raw_post(client, url: str, raw: bytes, content_type: str = "application/json", **extra):
    return client.post(url, data=raw, content_type=content_type, **extra)


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"[" * 10_000 + b"]" * 10_000, "body: nested 10000 levels deep, more than the limit 64"),
        (b'{"run_id": ' + b"9" * 5000 + b"}", "run_id: 999999999999... (5000 characters) is outside"),
        (b'{"run_id": NaN}', "run_id: NaN is not a JSON number"),
        (b'{"x": [1, Infinity]}', "x[1]: Infinity is not a JSON number"),
        (b'{"x": -Infinity}', "x: -Infinity is not a JSON number"),
        (b'{"x": 1e999}', "x: 1e999 overflows a floating-point number"),
        (b'{"x": {"y": 9007199254740992}}', "x.y: 9007199254740992 is outside"),
    ],
    ids=["deep", "5000-digit", "NaN", "Infinity", "-Infinity", "1e999", "2^53"],
)
def test_json_the_engine_or_the_database_cannot_hold_is_refused_before_parsing_or_storing(raw, error, env):
    before = _rows()
    response = _raw_post(env.agent, URL, raw)
    assert response.status_code == 400
    assert response.json()["errors"][0].startswith(error), response.json()
    assert _rows() == before


def test_source_ref_nested_to_the_depth_limit_is_accepted_and_one_level_more_is_refused(env):
    depth_of_source_ref = 3  # body -> candidates -> candidate -> source_ref's value
    body = copy.deepcopy(env.request)
    body["candidates"][12]["source_ref"]["deep"] = _nested(MAX_JSON_DEPTH - depth_of_source_ref - 1)
    response = env.submit(env.agent, body)
    assert response.status_code == 202, response.json()
    assert env.agent.get(response.json()["url"]).json()["status"] in ("ready", "blocked")

    before = _rows()
    body["candidates"][12]["source_ref"]["deep"] = _nested(MAX_JSON_DEPTH - depth_of_source_ref)
    response = env.submit(env.agent, body)
    assert response.status_code == 400
    assert response.json()["errors"] == [f"body: nested {MAX_JSON_DEPTH + 1} levels deep, more than the limit 64"]
    assert _rows() == before


def test_the_engine_refuses_a_source_ref_or_tool_arguments_nested_too_deep_by_field_path():
    """The CLI and the engine's own callers do not pass through the REST edge: the models bound it."""
    from ctxeng.engine import InvalidInput, parse_request
    from manifests.examples import example_json

    request = example_json("request.json")
    request["candidates"][12]["source_ref"] = _nested(MAX_JSON_DEPTH + 1)
    request["tool_calls"][0]["arguments"] = _nested(MAX_JSON_DEPTH + 1)
    with pytest.raises(InvalidInput) as raised:
        parse_request(request)
    paths = [e.split(":")[0] for e in raised.value.errors]
    assert sorted(paths) == ["candidates[12].source_ref", "tool_calls[0].arguments"], raised.value.errors


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "text/json"])
def test_a_json_body_sent_as_another_media_type_is_a_415(content_type, env):
    import json

    before = _rows()
    response = _raw_post(env.agent, URL, json.dumps(env.request).encode(), content_type=content_type)
    assert response.status_code == 415, response.content[:300]
    assert response.json()["errors"][0].startswith(f"Content-Type: {content_type} is not JSON")
    assert _rows() == before


def test_json_with_a_charset_or_a_json_suffix_media_type_is_accepted(env):
    import json

    raw = json.dumps({**env.request, "step_id": "charset"}).encode()
    assert _raw_post(env.agent, URL, raw, content_type="application/json; charset=utf-8").status_code == 202


def test_the_documented_limits_table_is_the_one_in_ctxeng_engine_limits():
    from pathlib import Path

    from ctxeng.engine.limits import limits_table_rows

    page = (Path(__file__).resolve().parents[2] / "docs" / "production.md").read_text()
    section = page.split("## Limits", 1)[1].split("\n## ", 1)[0]
    missing = [row for row in limits_table_rows() if row not in section.splitlines()]
    assert not missing, "docs/production.md 'Limits' is out of date; paste ctxeng.engine.limits.limits_table_rows()"


def test_drf_request_data_has_the_same_bounds_as_read_json():
    """The API's views read bodies with read_json; DRF's parser is the same edge for any view that
    reads request.data (DEFAULT_PARSER_CLASSES)."""
    import io

    from rest_framework.settings import api_settings
    from rest_framework.views import APIView

    from ctxeng.server.rest import ApiError, BoundedJSONParser

    assert APIView.parser_classes == api_settings.DEFAULT_PARSER_CLASSES == [BoundedJSONParser]
    with pytest.raises(ApiError) as raised:
        BoundedJSONParser().parse(io.BytesIO(b"[" * 5000 + b"]" * 5000))
    assert raised.value.errors == ["body: nested 5000 levels deep, more than the limit 64"]
    with pytest.raises(ApiError):
        BoundedJSONParser().parse(io.BytesIO(b'{"x": NaN}'))
    assert BoundedJSONParser().parse(io.BytesIO(b'{"x": [1, 2.5]}')) == {"x": [1, 2.5]}
