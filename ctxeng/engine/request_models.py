"""The assembly request's wire format (`AssemblyRequest`): what an agent submits — candidates,
tool calls, tools, runtime state, checkpoint and lifecycle events. Built on `model_base`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from .limits import (
    MAX_CANDIDATES,
    MAX_ID,
    MAX_INT32,
    MAX_ITEM_ID,
    MAX_NAME,
    Id,
    ItemIdRef,
    JsonObject,
    PolicyId,
    is_blank,
)
from .model_base import Frozen, Int, Number, Open
from .vocabulary import (
    AcquisitionOutcome,
    Freshness,
    InvalidationCause,
    LifecycleEvent,
    LoadMode,
    RevisionSource,
    Role,
    ToolResultStatus,
    Trust,
)


class PolicyRef(Frozen):
    id: PolicyId = Field(min_length=1, max_length=MAX_ID)
    revision: Int | None = Field(default=None, ge=1, le=MAX_INT32, description="omit to use the current published revision")
    digest: str | None = None


class Principal(Frozen):
    id: Id = Field(min_length=1)
    tenant: str = Field(min_length=1, max_length=MAX_NAME)
    project: str = Field(min_length=1)
    permissions: list[str] = Field(
        default_factory=list, description="the principal's grants; a change invalidates the prompt cache (permission_change)"
    )

    @field_validator("tenant", "project")
    @classmethod
    def _named(cls, v: str) -> str:
        return _principal_named(v)


def _principal_named(v: str) -> str:
    # Scopes are compared segment by segment with these: a blank one would match a blank segment.
    if is_blank(v) or "/" in v:
        raise ValueError("must name one scope segment: not blank, no '/'")
    return v


class ModelSpec(Frozen):
    # The providers the adapters, the estimators (Azure's are OpenAI's models) and the SDK know.
    provider: Literal["openai", "anthropic", "azure", "azure_openai", "azure-openai"]
    name: str = Field(min_length=1)
    context_limit: Int = Field(gt=0, le=MAX_INT32, description="tokens (at most 2^31 - 1)")
    api_version: str | None = None


class SourceSpec(Open):
    type: str
    id: Id


class SourceAcquisition(Frozen):
    source_request_id: Id = Field(min_length=1)
    source: SourceSpec
    outcome: AcquisitionOutcome
    reason: str | None = None
    result_digest: str | None = None


TOOL_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


class Turn(Frozen):
    """Where a conversation message stood: its position in the agent's history and who said it.

    Items with a turn are serialized in turn order after the context message, each in a message of
    its speaker's role, so two assistant turns stay two messages (`render`, `adapters`)."""

    index: Int = Field(ge=0, description="position of the message in the agent's history")
    speaker: Literal["user", "assistant"] = Field(description="assistant: only the agent's own output (intended_role derived_context)")


class ToolCall(Frozen):
    """One call the agent's assistant turn made, in assistant source order."""

    call_id: Id = Field(min_length=1)
    tool_name: str = Field(pattern=TOOL_NAME_PATTERN, description="the name both providers accept: [A-Za-z0-9_-]{1,64}")
    arguments: JsonObject = Field(default_factory=dict)
    status: ToolResultStatus = ToolResultStatus.UNKNOWN
    result_item_id: ItemIdRef | None = Field(default=None, description="candidate holding the result; null = unresolved")
    completed_seq: Int | None = Field(default=None, description="completion order; never changes pairing")
    turn: Int | None = Field(
        default=None, ge=0, description="the history position of the assistant turn that made the call; null = with the context"
    )
    caller_call_id: Id | None = Field(
        default=None, description="the id the agent's own history gives this call, when it reused that id in an earlier turn "
        "and the SDK named this call apart (`call_id`); the payload carries distinct ids, `step.messages` the caller's"
    )


class ToolDefinition(Frozen):
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str = ""
    parameters: JsonObject = Field(default_factory=lambda: {"type": "object", "properties": {}})
    type: str | None = Field(
        default=None, pattern=r"^(text_editor|bash)_[0-9]{8}$",
        description="an Anthropic client tool's type (text_editor_20250728, bash_20250124): the anthropic_messages adapter "
        "sends {type, name}; the OpenAI adapters send it as a function with `parameters`",
    )


class LineageNode(Frozen):
    node_id: Id
    type: str
    digest: str | None = None
    input_node_ids: list[Id] = Field(default_factory=list)
    input_digest: str | None = Field(default=None, description="for a derived node (excerpt): the digest of what it was cut from")
    transform_record_id: Id | None = Field(default=None, description="for a node the engine derived: its TransformRecord")


class InputRange(Frozen):
    start_item_id: Id
    end_item_id: Id


class ArtifactRef(Frozen):
    """Re-injection handle (seed §7): the service loads the object and re-admits it through every gate."""

    artifact_id: Id = Field(min_length=1, max_length=MAX_ITEM_ID)
    revision: Int | Annotated[str, Field(max_length=MAX_NAME)] | None = None


class StoredArtifact(Frozen):
    """An artifact revision as the artifact store holds it: what re-injection checks an item against.

    The service builds these from its tenant-scoped Artifact rows, the CLI from `--artifacts DIR`;
    an agent never supplies them, so a re-injected item cannot vouch for itself."""

    artifact_id: Id = Field(min_length=1)
    revision: Int | str
    kind: str = Field(min_length=1)
    content: str
    content_hash: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    writer: str = Field(min_length=1)
    scope: str = Field(min_length=1)


class RequiredRevision(Frozen):
    """A required revision with the authority that asserts it (policy `revision_authority`)."""

    revision: Int | str
    source: RevisionSource = Field(description="who asserts it: never a retrieval result")


class LifecycleEventRecord(Frozen):
    """A lifetime event (policy `expiry.on`) hitting one item, every item under a scope, or an artifact."""

    event: LifecycleEvent
    item_id: Id | None = None
    scope: str | None = None
    artifact_id: Id | None = None
    revision: Int | str | None = Field(default=None, description="with artifact_id: only this revision is hit")
    detail: str = ""
    emitted_by: Literal["agent", "service"] = "agent"

    @model_validator(mode="after")
    def _one_target(self) -> LifecycleEventRecord:
        return _lifecycle_event_record_one_target(self)


def _lifecycle_event_record_one_target(event: LifecycleEventRecord) -> LifecycleEventRecord:
    targets = [t for t in (event.item_id, event.scope, event.artifact_id) if t is not None]
    if len(targets) != 1:
        raise ValueError("item_id: give exactly one of item_id, scope or artifact_id")
    for name, value in (("item_id", event.item_id), ("scope", event.scope), ("artifact_id", event.artifact_id)):
        # A blank scope would be every item's ancestor (the event would hit them all); a blank id, none.
        if value is not None and is_blank(value.replace("/", "")):
            raise ValueError(f"{name}: a blank {name} names nothing to act on")
    return event


Sha256 = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
# A payload's units: the tools, the system text, and at most two messages per candidate (a call and
# its result) plus the placeholder and the context message.
MAX_PAYLOAD_UNITS = 2 * MAX_CANDIDATES + 4


class PreviousCache(Frozen):
    """The previous step's cache record, as its manifest sealed it (`manifest.cache`)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    prefix_identity: str | None = Field(description="null: the previous step was blocked (nothing was sent or cached), so this one is a miss")
    invalidation_keys: dict[InvalidationCause, str] = Field(default_factory=dict)
    payload_prefix_hashes: list[Sha256] = Field(
        default_factory=list,
        max_length=MAX_PAYLOAD_UNITS,
        description="the previous step's payload prefix hashes, for this step's cache-eligible tokens; empty: unknown (none are eligible)",
    )


class ContextItem(Frozen):
    """A candidate (seed §2 ContextItem plus content, kind, ranking and summary fields)."""

    item_id: Id = Field(min_length=1, max_length=MAX_ITEM_ID)
    kind: str = Field(min_length=1, max_length=MAX_NAME)
    source_type: str = Field(min_length=1, max_length=MAX_NAME)
    source_ref: JsonObject
    source_lineage: list[LineageNode] = Field(default_factory=list)
    producer: str = ""
    content: str | None = Field(default=None, description="inline content; null only with artifact_ref")
    artifact_ref: ArtifactRef | None = None
    content_hash: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    revision: Int | str | None = None
    scope: str = Field(min_length=1)
    observed_at: str | None = None
    freshness: Freshness = Freshness.VALID
    trust: Trust | None = Field(default=None, description="null = the policy's default for source_type")
    intended_role: Role
    security_class: str = "internal"
    completeness: Literal["complete", "partial", "unknown"] = "complete"
    estimated_tokens: Int | None = Field(default=None, ge=0, description="ignored: the engine counts itself")
    relevance: Number | None = Field(default=None, ge=0.0, le=1.0)
    stages: list[str] | None = Field(default=None, description="stages this item serves; null = every stage")
    load_mode: LoadMode | None = None
    required: bool = Field(default=False, description="blocked if this item cannot be included")
    call_id: Id | None = None
    claim: str | None = None
    open_item_ids: list[Id] | None = None
    input_item_ids: list[Id] | None = None
    input_range: InputRange | None = None
    source_refs: list[JsonObject] | None = None
    preserves: JsonObject | None = None
    source_request_id: Id | None = None
    turn: Turn | None = Field(default=None, description="a conversation message's place in the history; null = context, not a turn")

    @model_validator(mode="after")
    def _content_or_artifact(self) -> ContextItem:
        return _context_item_content_or_artifact(self)


def _context_item_content_or_artifact(item: ContextItem) -> ContextItem:
    if item.content is None and item.artifact_ref is None:
        raise ValueError("content: field required (or give artifact_ref for re-injection)")
    if item.turn is not None:
        if item.intended_role == Role.CONTROL:
            raise ValueError("turn: a control item is system text and has no turn")
        if item.call_id is not None:
            raise ValueError("turn: a tool result stands where its call's turn is (set tool_calls[].turn)")
        if item.turn.speaker == "assistant" and item.intended_role != Role.DERIVED_CONTEXT:
            raise ValueError("turn.speaker: 'assistant' is only for the agent's own output (intended_role derived_context)")
    return item


class CheckpointClaim(Frozen):
    claim: str
    source_ref: JsonObject


class CheckpointState(Frozen):
    """Structured state for the deterministic checkpoint summary of seed §6."""

    summary_id: Id = Field(default="checkpoint-summary", min_length=1, max_length=MAX_ITEM_ID)
    goal: str
    constraints: list[str] = Field(default_factory=list)
    current_stage: str
    done: list[str] = Field(default_factory=list)
    in_progress: list[str] = Field(default_factory=list)
    blocked: list[str] = Field(default_factory=list)
    confirmed_claims: list[CheckpointClaim] = Field(default_factory=list)
    conflicts_and_negative_findings: list[str] = Field(default_factory=list)
    open_item_ids: list[Id] = Field(default_factory=list)
    draft_revision: Int | str | None = None
    unresolved_tool_calls: list[str] = Field(default_factory=list, description="call ids still without a result")
    next_steps: list[str] = Field(default_factory=list)
    artifact_refs: list[str] = Field(default_factory=list)
    input_item_ids: list[Id] = Field(min_length=1)
    input_range: InputRange | None = None


class RuntimeState(Frozen):
    """What the runtime knows for verifying summaries (optional; derived from items when absent)."""

    open_item_ids: list[Id] | None = None
    article_draft_revision: Int | str | None = None
    publish_destination: str | None = Field(
        default=None, max_length=MAX_NAME,
        description="where this step publishes; a review decision counts for `stages.<stage>.approved_by` only when it binds this destination",
    )


# What the adapters write themselves, and the parameters that size the reply.
PAYLOAD_FIELDS = frozenset({"model", "messages", "system", "tools", "input", "instructions"})
REPLY_SIZE_PARAMS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


class AssemblyRequest(Frozen):
    schema_version: Literal["assembly-request/v1"] = "assembly-request/v1"
    run_id: Id = Field(min_length=1, max_length=MAX_ID)
    step_id: Id = Field(min_length=1, max_length=MAX_ID)
    policy: PolicyRef
    principal: Principal
    scope: str = Field(min_length=1)
    stage: str = Field(min_length=1)
    model: ModelSpec
    adapter: str | None = Field(default=None, description="null = the policy's serialization.adapter")
    task_type: str | None = Field(default=None, description="checked against the policy's scope.task_type")
    required_revisions: dict[str, Int | str | RequiredRevision] = Field(
        default_factory=dict,
        description="object -> revision; a bare value is asserted by the task spec (revision_authority task_spec)",
    )
    source_acquisition: list[SourceAcquisition] = Field(default_factory=list)
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tools: list[ToolDefinition] = Field(default_factory=list)
    candidates: list[ContextItem]
    runtime_state: RuntimeState | None = None
    checkpoint: CheckpointState | None = None
    runtime_policy_revision: str | None = None
    previous_prefix_identity: str | None = Field(
        default=None,
        description="deprecated: without the previous invalidation keys a hit cannot be verified, so the status is miss; send previous_cache",
    )
    previous_cache: PreviousCache | None = Field(default=None, description="the previous step's manifest.cache, for hit/miss")
    lifecycle_events: list[LifecycleEventRecord] = Field(default_factory=list)
    diagnostic_item_ids: list[Id] = Field(
        default_factory=list, description="diagnostic-source items (traces) the agent asks for by id at this step"
    )
    params: JsonObject = Field(
        default_factory=dict,
        description="the caller's own provider request parameters (max_tokens, temperature, tool_choice, ...): sent "
        "unchanged; the reply size they ask for (max_tokens, max_completion_tokens, max_output_tokens) is reserved",
    )

    @field_validator("params")
    @classmethod
    def _params_are_the_callers(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _assembly_request_params_are_the_callers(value)

    def reply_tokens(self) -> int | None:
        """The reply size the caller asked for, when it did."""
        sizes = [self.params[k] for k in REPLY_SIZE_PARAMS if k in self.params]
        return max(sizes) if sizes else None

    def pinned_to(self, revision: int) -> AssemblyRequest:
        """This request naming exactly `revision` of its policy (what a job runs under)."""
        return self.model_copy(update={"policy": self.policy.model_copy(update={"revision": revision})})

    def required_revision_map(self) -> dict[str, tuple[int | str, RevisionSource]]:
        out: dict[str, tuple[int | str, RevisionSource]] = {}
        for name, value in self.required_revisions.items():
            if isinstance(value, RequiredRevision):
                out[name] = (value.revision, value.source)
            else:
                out[name] = (value, RevisionSource.TASK_SPEC)
        return out

    @model_validator(mode="after")
    def _references_resolve(self) -> AssemblyRequest:
        return _assembly_request_references_resolve(self)


def _assembly_request_params_are_the_callers(value: dict[str, Any]) -> dict[str, Any]:
    for key, v in value.items():
        # Named below the field: describe() puts `params.` in front (`params.model: ...`).
        if key in PAYLOAD_FIELDS:
            raise ValueError(f"{key}: ctxeng writes this field of the payload; pass only request parameters")
        if key in REPLY_SIZE_PARAMS and (isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= MAX_INT32):
            raise ValueError(f"{key}: expected a positive integer, got {v!r}")
    return value


def _assembly_request_references_resolve(request: AssemblyRequest) -> AssemblyRequest:
    seen: dict[str, int] = {}
    for i, item in enumerate(request.candidates):
        if item.item_id in seen:
            raise ValueError(
                f"candidates[{i}].item_id: duplicate item_id {item.item_id!r} "
                f"(also candidates[{seen[item.item_id]}])"
            )
        seen[item.item_id] = i
    calls: dict[str, int] = {}
    completed: dict[int, int] = {}
    for i, call in enumerate(request.tool_calls):
        if call.call_id in calls:
            raise ValueError(f"tool_calls[{i}].call_id: duplicate call_id {call.call_id!r}")
        calls[call.call_id] = i
        # A completion order: two calls cannot have completed at the same place in it.
        if call.completed_seq is not None:
            if call.completed_seq in completed:
                raise ValueError(f"tool_calls[{i}].completed_seq: {call.completed_seq} is also the completed_seq of "
                                 f"tool_calls[{completed[call.completed_seq]}]; each completed call has its own place")
            completed[call.completed_seq] = i
        if call.result_item_id is not None:
            j = seen.get(call.result_item_id)
            if j is None:
                raise ValueError(
                    f"tool_calls[{i}].result_item_id: result item {call.result_item_id!r} "
                    "is not among the candidates"
                )
            if request.candidates[j].call_id != call.call_id:
                raise ValueError(
                    f"candidates[{j}].call_id: must be {call.call_id!r} to pair with tool_calls[{i}]"
                )
    for j, item in enumerate(request.candidates):
        if item.call_id is not None:
            i = calls.get(item.call_id)
            if i is None:
                raise ValueError(f"candidates[{j}].call_id: no tool call with call_id {item.call_id!r}")
            if request.tool_calls[i].result_item_id != item.item_id:
                raise ValueError(
                    f"candidates[{j}].call_id: tool call {item.call_id!r} names another result item"
                )
    user_turns = {item.turn.index: j for j, item in enumerate(request.candidates) if item.turn is not None and item.turn.speaker == "user"}
    for i, call in enumerate(request.tool_calls):
        if call.turn is not None and call.turn in user_turns:
            raise ValueError(
                f"tool_calls[{i}].turn: turn {call.turn} is a user turn (candidates[{user_turns[call.turn]}]); a call is made by an assistant turn"
            )
    speakers: dict[int, tuple[str, int]] = {}
    for j, item in enumerate(request.candidates):
        if item.turn is None:
            continue
        seen_speaker = speakers.setdefault(item.turn.index, (item.turn.speaker, j))
        if seen_speaker[0] != item.turn.speaker:
            raise ValueError(
                f"candidates[{j}].turn.speaker: turn {item.turn.index} is already a {seen_speaker[0]} turn (candidates[{seen_speaker[1]}])"
            )
    acq: set[str] = set()
    for i, rec in enumerate(request.source_acquisition):
        if rec.source_request_id in acq:
            raise ValueError(
                f"source_acquisition[{i}].source_request_id: duplicate {rec.source_request_id!r}"
            )
        acq.add(rec.source_request_id)
    return request
