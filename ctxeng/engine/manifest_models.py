"""The sealed manifest's wire format (`ContextAssemblyManifest`, seed §10): every decision of
one assembly, as the seal writes it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
)

from .model_base import Frozen
from .request_models import (
    ArtifactRef,
    InputRange,
    LifecycleEventRecord,
    LineageNode,
    ModelSpec,
    Principal,
    SourceAcquisition,
    Turn,
)
from .vocabulary import (
    AssemblyStatus,
    AssertionResult,
    BlockedReason,
    Borrowing,
    CacheIdentityField,
    CacheStatus,
    Eviction,
    EvidenceUse,
    ExclusionReason,
    Freshness,
    GateResult,
    HardGate,
    InvalidationCause,
    LoadMode,
    ProducerCheck,
    Role,
    ToolResultStatus,
    TransformType,
    Trust,
    UnresolvedCallHandling,
    Zone,
)


class PolicyIdentity(Frozen):
    id: str
    revision: int
    digest: str


class AdapterIdentity(Frozen):
    name: str
    version: str
    serialization_policy_version: str


EstimateBasis = Literal["model table", "newest encoding for an unknown OpenAI model", "no public tokenizer", "tokenizer given by the caller"]
CalibrationBasis = Literal["exact count", "reported usage", "default factor"]


class Estimate(Frozen):
    """How input tokens were counted for the request's model (`ctxeng.engine.estimators`)."""

    encoding: str = Field(description="the encoding that counted (tiktoken name), or the caller's tokenizer's name")
    exact: bool = Field(description="true only when this encoding is the model's own tokenizer")
    basis: EstimateBasis


class Calibration(Frozen):
    """The margin for one model's inexact counts: an input of `assemble(calibration=...)`, computed
    from usage reports by `estimators.calibrate` (the service) or the policy's default."""

    model: str = Field(min_length=1)
    factor: float = Field(ge=1, le=4, description="usable input tokens are divided by this before allocation")
    quantile: float | None = Field(default=None, gt=0, le=1, description="budget.calibration.quantile; null for an exact count")
    reports_used: int = Field(default=0, ge=0, description="usage reports the factor was taken from (0: the default factor)")
    reports_available: int = Field(default=0, ge=0, description="usage reports of this model the calibration could read")
    basis: CalibrationBasis


class CalibrationRecord(Calibration):
    usable_input_uncalibrated: int | None = Field(
        default=None, description="context - response_reserve - protocol_overhead - safety_margin before the division; budget.usable_input is after it"
    )


class AssemblyHeader(Frozen):
    id: str
    run_id: str
    step_id: str
    status: AssemblyStatus
    blocked_reason: BlockedReason | None = None
    missing: list[str] = Field(default_factory=list)
    blocked_detail: list[str] = Field(default_factory=list)
    policy: PolicyIdentity
    model: ModelSpec
    adapter: AdapterIdentity
    principal: Principal
    scope: str
    stage: str
    estimator: str
    estimate: Estimate | None = Field(default=None, description="which encoding counted and whether that count is exact for this model (absent in manifests before it was recorded)")
    calibration: CalibrationRecord | None = Field(default=None, description="the factor the usable input was divided by before allocation, and where it came from")
    candidate_set_digest: str
    assembly_input_hash: str | None = None
    serialized_model_input_hash: str | None = None
    data_fence_nonce: str = Field(description="empty since adapters 1.3.0: fences carry no nonce (content cannot spell a marker, render.escape); older manifests hold the per-assembly nonce they were fenced with")
    structure_checks: dict[str, AssertionResult] = Field(default_factory=dict, description="policy structure.preserve, checked on the rendered input")
    serialization_checks: dict[str, AssertionResult] = Field(default_factory=dict, description="policy serialization.preserve, checked on the payload")
    created_at: str


class CandidateRecord(Frozen):
    item_id: str
    kind: str
    source_type: str
    source_ref: dict[str, Any]
    source_request_id: str | None = None
    producer: str
    content_hash: str
    revision: int | str | None
    scope: str
    freshness: Freshness
    trust: Trust | None
    intended_role: Role
    security_class: str
    completeness: str
    estimated_tokens: int | None
    token_count: Literal["exact", "lower_bound"] = Field(
        default="exact",
        description="exact: estimated_tokens is the item's block counted with the estimator; lower_bound: the item was "
        "never counted (no decision needed its size) and estimated_tokens is a proven lower bound of that count",
    )
    artifact_ref: ArtifactRef | None = None


class PartitionUsage(Frozen):
    used: int
    minimum: int
    maximum: int | None = None
    eviction: Eviction
    items: int
    # Usage above the partition's own minimum, and the part of it taken from the minimum another
    # partition left unused (not from the free pool the minimums leave): `budget.borrowed_by_partition`.
    above_minimum: int = 0
    borrowed: int = 0


class BudgetRecord(Frozen):
    model_context_limit: int
    response_reserve: int
    protocol_overhead: int
    safety_margin: int
    usable_input: int
    estimated_used: int
    # The text ctxeng adds that is no item's (data-boundary notice, system-text separators, the
    # empty-user placeholder, tool definitions): reserved before the partitions share the rest,
    # then counted on the payload. payload_tokens = estimated_used + framing_tokens is the count of
    # every string the payload carries; it never exceeds usable_input (else the assembly blocks).
    framing_reserved: int = 0
    framing_tokens: int | None = None
    payload_tokens: int | None = None
    actual_input_tokens: int | None = None
    borrowing: Borrowing
    partitions: dict[str, PartitionUsage]


class IncludedRecord(Frozen):
    item_id: str
    kind: str
    source_type: str
    source_ref: dict[str, Any]
    source_lineage: list[LineageNode]
    content_hash: str
    revision: int | str | None
    scope: str
    trust: Trust
    intended_role: Role
    zone: Zone
    security_class: str
    hard_gate_results: dict[str, GateResult]
    security_assessment: dict[str, str]
    reinjection_checks: dict[str, GateResult] = Field(default_factory=dict, description="re-injected artifacts: policy reinjection.require, clause by clause")
    admission_reason: str
    load_mode: LoadMode
    partition: str
    tokens: int
    rank: int | None = None
    transform_record_id: str | None = None
    call_id: str | None = None
    evidence_use: EvidenceUse | None = Field(
        default=None, description="tool results; and diagnostic_only for a partial/unknown item admission.allow_incomplete let in"
    )
    turn: Turn | None = Field(default=None, description="the conversation turn the item was serialized at; null = the context message")
    producer_check: ProducerCheck | None = Field(default=None, description="trust.producers for the item's source type (null: manifests before the clause)")


class ExcludedRecord(Frozen):
    item_id: str
    kind: str
    source_type: str
    source_ref: dict[str, Any]
    content_hash: str
    trust: Trust | None
    intended_role: Role
    security_class: str
    reason: ExclusionReason
    hard_gate: HardGate | None = None
    hard_gate_results: dict[str, GateResult] = Field(default_factory=dict)
    security_assessment: dict[str, str] | str = Field(default_factory=dict)
    reinjection_checks: dict[str, GateResult] = Field(default_factory=dict)
    detail: str
    refresh_condition: str | None = None
    partition: str | None = None
    tokens: int | None = None
    token_count: Literal["exact", "lower_bound"] = Field(
        default="exact",
        description="exact: tokens is the item's block counted; lower_bound: the item was excluded without being counted "
        "(a hard gate, or a budget that evicted it because even this proven lower bound did not fit)",
    )
    failed_assertions: list[str] = Field(default_factory=list)
    call_id: str | None = None
    replaced_by: str | None = Field(default=None, description="the structured summary that stands in for this budget-evicted item")
    producer_check: ProducerCheck | None = Field(default=None, description="trust.producers for the item's source type (null: manifests before the clause)")


class JudgedStatement(Frozen):
    """One absence statement of a summary, judged on its own text (`findings.judge_statements`)."""

    statement: str
    scope: list[str] | None = Field(description="the search scope it names, entries sorted; null: none")
    judged_as: Literal["negative_finding", "existence_claim"]
    result: Literal["passed", "failed"]
    problem: str | None = None
    section: str | None = Field(default=None, description="the summary section it was read in (`Done / In Progress / Blocked`, `Confirmed Claims` ...); null: before any heading")


class NegativeFindingsCheck(Frozen):
    """How `conflicts_and_negative_findings` was judged (seed §6): the summary's own absence
    statements, each on its text whether or not its inputs are visible; then the negative findings
    of every input the engine could read, each kept with its scope or not."""

    statements: list[JudgedStatement] = Field(default_factory=list)
    inputs_compared: list[str] = Field(default_factory=list, description="inputs whose negative findings were read and looked for in the summary")
    inputs_not_visible: list[str] = Field(default_factory=list, description="inputs the engine cannot read (earlier turns): their findings could not be compared")
    lost: list[str] = Field(default_factory=list, description="negative findings of the compared inputs the summary does not keep with their scope")


class TransformRecord(Frozen):
    record_id: str
    type: TransformType
    input_item_ids: list[str]
    input_range: InputRange | None = None
    input_digest: str
    objective: str
    policy_version: str
    transformer_version: str
    output_item_id: str
    output_digest: str | None
    preservation_assertions: dict[str, AssertionResult]
    token_estimate_before: int
    token_estimate_after: int | None
    trust_before: str
    trust_after: str
    status: Literal["applied", "verified", "blocked"]
    before_excerpt: str = ""
    after_excerpt: str = ""
    trigger: str | None = Field(default=None, description="what made it run: over_source_limit, over_partition, superseded_write (a later write of the same object), or supplied (a supplied summary verified)")
    negative_findings: NegativeFindingsCheck | None = Field(
        default=None, description="a summary under transforms.preserve conflicts_and_negative_findings: which statements were judged, and how"
    )


class ArgumentRedaction(Frozen):
    """A credential redacted from the payload's copy of a call's arguments: where and by what, never the value."""

    path: str = Field(description="the field path in the request: tool_calls[<i>].arguments.<key>...")
    detector: str = Field(description="the detector that found it (`Keyword Value`, `AWS Access Key` ...)")


class ToolPairRecord(Frozen):
    call_id: str
    caller_call_id: str | None = Field(
        default=None, description="the id the agent's history gives the call: `call_id`, unless the SDK named a reused id apart"
    )
    serialized_call_id: str
    tool_name: str
    canonicalization: str = "tool_name_plus_canonical_json_args/v1"
    canonical_argument_hash: str
    result_item_id: str | None
    result_hash: str | None
    status: ToolResultStatus
    pairing_assertion: str
    evidence_use: EvidenceUse
    completed_seq: int | None
    source_order: int
    serialized_order: int | None
    decision: Literal["included", "excluded", "unresolved"]
    unresolved_handling: UnresolvedCallHandling | None = None
    tokens: int | None = None
    turn: int | None = Field(default=None, description="the assistant turn the call was serialized at; null = with the context")
    argument_redactions: list[ArgumentRedaction] = Field(
        default_factory=list, description="credentials redacted from the call's arguments in the payload (security.secrets_in_call_arguments: redact)"
    )


class SummaryRecord(Frozen):
    summary_id: str
    item_id: str
    input_item_ids: list[str]
    input_range: InputRange | None = None
    input_digest: str
    transform_record_id: str
    preservation_assertions: dict[str, AssertionResult]
    decision: Literal["included", "excluded", "not_admitted"]


class ArtifactRefRecord(Frozen):
    kind: str
    id: str
    revision: int | str | None = None
    hash: str | None = None
    item_id: str | None = None


class ConflictRecord(Frozen):
    """Two readings of one object at the same stated revision or commit that differ where they
    overlap (ctxeng.engine.versions): both are kept, neither is "newer"; the conflict is evidence."""

    object: str = Field(description="the object, in words: \"path 'src/x.py' in repo 'payments-api'\"")
    revision: str = Field(description="the revision or commit both readings state")
    item_ids: list[str] = Field(description="the two readings")
    ranges: list[str] = Field(description="each reading's range: 'lines 120-160', 'the whole', or a part in words")
    detail: str


class CacheRecord(Frozen):
    prefix_hash: str | None = Field(description="sha256 of the stable prefix's text; null when there is none or the assembly is blocked")
    prefix_identity: str | None = Field(
        description="sha256 of the policy's cache.identity fields; null when the assembly is blocked (no payload, no prefix)"
    )
    prefix_source_ids: list[str]
    policy: Literal["eligible", "bypassed"]
    status: CacheStatus
    identity_fields: list[CacheIdentityField] = Field(default_factory=list, description="what prefix_identity was computed from (policy cache.identity)")
    invalidation_keys: dict[InvalidationCause, str] = Field(default_factory=dict, description="one digest per policy cache.invalidate_on cause")
    invalidated_by: list[str] = Field(default_factory=list, description="why a would-be hit is a miss")
    provider_marker: ProviderCacheMarker | None = Field(
        default=None, description="the provider cache marker the payload carries (read back from it); null: none was set"
    )
    stable_prefix_sources: list[str] = Field(
        default_factory=list,
        description="why the prefix is stable: the policy's cache.stable_prefix_sources, the control sources it is made of (seed §5, §10)",
    )
    stable_prefix_tokens: int | None = Field(
        default=None, ge=0, description="the stable prefix text's tokens by the manifest's estimator; null when there is none"
    )
    payload_prefix_hashes: list[str] = Field(
        default_factory=list,
        description="sha256 of the payload's canonical units 0..i, each unit's canonical JSON followed by a newline "
                    "(unit 0: model and tools; then system or instructions; then each message or input item); empty when blocked",
    )
    payload_text_tokens: int | None = Field(
        default=None, ge=0, description="the payload units' text tokens by the manifest's estimator (the denominator of cache_eligible_share)"
    )
    cache_eligible_units: int = Field(default=0, ge=0, description="leading payload units byte-identical to the previous step's")
    cache_eligible_tokens: int = Field(
        default=0, ge=0, description="the text tokens of those units: what a provider's automatic prefix cache could serve"
    )
    cache_eligible_share: float | None = Field(
        default=None, ge=0, le=1, description="cache_eligible_tokens / payload_text_tokens; null when blocked or the payload has no text"
    )
    cache_eligible_basis: Literal[
        "previous_step", "no_previous_step", "previous_step_blocked", "previous_prefix_hashes_unknown", "blocked"
    ] = Field(default="no_previous_step", description="what the units were compared with, or why nothing could be")
    previous_cache_from: Literal["request", "service"] = Field(
        default="request",
        description="where the previous step's record that status and cache_eligible_* compare with came from: "
                    "`request`, the caller's previous_cache, a claim nobody checked (a step assembled by the agent, "
                    "a recorded step, a manifest sealed before issue 51); `service`, the run's previous ready step "
                    "as the service itself sealed it (a remote job)",
    )
    cache_eligible_ends_at: str | None = Field(
        default=None,
        description="the payload path of the first unit not repeated (`messages[12]`, `system`, `tools`); null when every unit was or nothing was compared",
    )


class ProviderCacheMarker(Frozen):
    """Where the payload asks the provider to cache, and which prefix that covers (`cache.py`)."""

    provider: Literal["anthropic", "openai"]
    kind: Literal["cache_control", "prompt_cache_key"]
    at: str = Field(description="JSON path in the payload: `system[0]` (the block carrying cache_control) or `prompt_cache_key`")
    key: str | None = Field(default=None, description="the prompt_cache_key sent; null for cache_control")
    prefix_identity: str | None = Field(description="the cache record's prefix identity when exactly the stable prefix is marked, else null")
    tokens: int = Field(ge=0, description="the marked prefix's tokens by the manifest's estimator")
    minimum_tokens: int | None = Field(default=None, description="the provider's documented minimum cacheable length for this model")


class StageRecord(Frozen):
    seq: int
    stage: str
    items_in: int
    items_out: int
    note: str = ""


class ContextAssemblyManifest(Frozen):
    manifest_schema_version: Literal["context-assembly-manifest/v1"] = "context-assembly-manifest/v1"
    assembly: AssemblyHeader
    source_acquisition: list[SourceAcquisition]
    candidate_items: list[CandidateRecord]
    budget: BudgetRecord
    included: list[IncludedRecord]
    excluded: list[ExcludedRecord]
    transforms: list[TransformRecord]
    tool_pairs: list[ToolPairRecord]
    summaries: list[SummaryRecord]
    artifact_refs: list[ArtifactRefRecord]
    checkpoint_ref: str | None = None
    lifecycle_events: list[LifecycleEventRecord] = Field(default_factory=list, description="the lifetime events this assembly acted on")
    conflicts: list[ConflictRecord] = Field(
        default_factory=list, description="readings of one object at the same stated revision that differ where they overlap; both kept"
    )
    cache: CacheRecord
    stages: list[StageRecord]

    def excluded_reasons(self) -> dict[str, str]:
        return {e.item_id: e.reason.value for e in self.excluded}

    def included_ids(self) -> list[str]:
        return [i.item_id for i in self.included]
