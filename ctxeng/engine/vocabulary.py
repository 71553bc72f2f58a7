"""The vocabulary of DESIGN.md, defined once.

Every decision word the engine writes into a manifest comes from an enum here, so the API, the
dashboard and the tests all spell them the same way. Enums subclass `str` so they serialize as
their plain values.
"""

from __future__ import annotations

from enum import StrEnum


class ExclusionReason(StrEnum):
    HARD_GATE_REJECTED = "hard_gate_rejected"
    PERMISSION_DENIED = "permission_denied"
    STALE_REVISION = "stale_revision"
    EXPIRED = "expired"
    UNVERIFIABLE = "unverifiable"
    RANKING_LOST = "ranking_lost"
    BUDGET_EVICTED = "budget_evicted"
    SECURITY_REJECTED = "security_rejected"
    TRANSFORM_BLOCKED = "transform_blocked"
    DUPLICATE = "duplicate"  # a later reading of the same object covers it (ctxeng.engine.versions)


class AcquisitionOutcome(StrEnum):
    RETRIEVED = "retrieved"
    NOT_RETRIEVED = "not_retrieved"
    RETRIEVAL_FAILED = "retrieval_failed"


class Freshness(StrEnum):
    VALID = "valid"
    REFRESH_REQUIRED = "refresh_required"
    EXPIRED = "expired"
    UNVERIFIABLE = "unverifiable"


class Trust(StrEnum):
    CONTROL_AUTHORITY = "control_authority"
    TASK_AUTHORITY = "task_authority"
    TRUSTED_STATE = "trusted_state"
    REPOSITORY_EVIDENCE = "repository_evidence"
    EXTERNAL_EVIDENCE = "external_evidence"
    PROJECT_EDITABLE = "project_editable"
    DERIVED_CONTEXT = "derived_context"
    GOVERNED_MEMORY_CANDIDATE = "governed_memory_candidate"


# Authority order used to prove "trust never rises": a transform's output may not rank above its
# input, and an item may not claim more authority than its source type grants by default.
TRUST_RANK: dict[Trust, int] = {
    Trust.CONTROL_AUTHORITY: 7,
    Trust.TASK_AUTHORITY: 6,
    Trust.TRUSTED_STATE: 5,
    Trust.REPOSITORY_EVIDENCE: 4,
    Trust.EXTERNAL_EVIDENCE: 3,
    Trust.PROJECT_EDITABLE: 2,
    Trust.DERIVED_CONTEXT: 2,
    Trust.GOVERNED_MEMORY_CANDIDATE: 1,
}


# Trust labels that carry authority over the agent; every other label is data to analyse. Source
# types defaulting to one of these are the ones `trust.producers` binds to their producers.
AUTHORITY_TRUST = (Trust.CONTROL_AUTHORITY, Trust.TASK_AUTHORITY, Trust.TRUSTED_STATE)


class Role(StrEnum):
    CONTROL = "control"
    TASK_INTENT = "task_intent"
    STATE = "state"
    UNTRUSTED_DATA = "untrusted_data"
    DERIVED_CONTEXT = "derived_context"


class Zone(StrEnum):
    """The four trust zones an admitted item is placed in (seed §4)."""

    CONTROL = "control"
    TASK = "task"
    STATE = "state"
    UNTRUSTED_DATA = "untrusted_data"


ROLE_ZONE: dict[Role, Zone] = {
    Role.CONTROL: Zone.CONTROL,
    Role.TASK_INTENT: Zone.TASK,
    Role.STATE: Zone.STATE,
    Role.DERIVED_CONTEXT: Zone.STATE,
    Role.UNTRUSTED_DATA: Zone.UNTRUSTED_DATA,
}


class ToolResultStatus(StrEnum):
    SUCCESS = "success"
    ERROR = "error"
    CANCELED = "canceled"
    PARTIAL = "partial"
    UNKNOWN = "unknown"


class EvidenceUse(StrEnum):
    CONFIRMED_BY_POLICY = "confirmed_by_policy"
    DIAGNOSTIC_ONLY = "diagnostic_only"
    UNRESOLVED = "unresolved"


class LoadMode(StrEnum):
    RESIDENT = "resident"
    RETRIEVE = "retrieve"
    DISCLOSE = "disclose"


class AssemblyStatus(StrEnum):
    READY = "ready"
    BLOCKED = "blocked"


class BlockedReason(StrEnum):
    """The seed's controlled set (§9, §10): `required_partition_missing | transform_blocked`, and no
    other. The precise cause of a block is a detail (`BlockedCause`), never a third reason."""

    REQUIRED_PARTITION_MISSING = "required_partition_missing"
    TRANSFORM_BLOCKED = "transform_blocked"


class BlockedCause(StrEnum):
    """The precise cause behind a blocked reason, written at the head of its `blocked_detail` line
    (`budget_exhausted: partition 'control' (eviction never) cannot hold ...`)."""

    # A required part did not fit its budget (an `eviction: never` item, a required item over its
    # source limit, a budget with no usable input): reason required_partition_missing.
    BUDGET_EXHAUSTED = "budget_exhausted"
    # The rendered or serialized input broke a property the policy preserves (structure.preserve,
    # serialization.preserve), checked after rendering: reason transform_blocked (the render and
    # the adapter's serialization are the last transforms, and their preservation failed).
    STRUCTURE_CHECK_FAILED = "structure_check_failed"
    # A credential in the agent's own tool-call arguments under `security.secrets_in_call_arguments:
    # block`: reason transform_blocked (the redaction that would make the call sendable is the
    # transform the policy refuses).
    SECRET_IN_CALL_ARGUMENTS = "secret_in_call_arguments"


class GateResult(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    NOT_EVALUATED = "not_evaluated"


class ProducerCheck(StrEnum):
    """`producer_check` of an item: is its producer one `trust.producers` lists for its source type?"""

    PASSED = "passed"
    FAILED = "failed"
    NOT_CONFIGURED = "not_configured"  # an authority source type without a producer list
    NOT_APPLICABLE = "not_applicable"  # a data source type: anyone may emit data
    NOT_EVALUATED = "not_evaluated"  # an earlier gate rejected the item


class AssertionResult(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    NOT_APPLICABLE = "not_applicable"


class HardGate(StrEnum):
    """Hard filters, in the order a policy may list them (seed §10 `admission.hard_filters`)."""

    PERMISSION = "permission"
    TENANT_AND_PROJECT_SCOPE = "tenant_and_project_scope"
    REQUIRED_REVISION = "required_revision"
    FRESHNESS = "freshness"
    TRUST_ROLE_COMPATIBILITY = "trust_role_compatibility"
    STRUCTURAL_INTEGRITY = "structural_integrity"
    SECURITY_POLICY_COMPLIANCE = "security_policy_compliance"


class RankingFactor(StrEnum):
    CURRENT_DECISION_RELEVANCE = "current_decision_relevance"
    STAGE_RELEVANCE = "stage_relevance"
    EVIDENCE_PRIORITY = "evidence_priority"
    RETRIEVAL_COST = "retrieval_cost"


class Eviction(StrEnum):
    NEVER = "never"
    STRUCTURED_SUMMARY = "structured_summary"
    REDUCE_CANDIDATES = "reduce_candidates"
    COMPLETE_PAIR_ONLY = "complete_pair_only"
    FIRST = "first"


class Borrowing(StrEnum):
    PRESERVE_ALL_MINIMUMS = "preserve_all_minimums"
    LEND_UNUSED_MINIMUMS = "lend_unused_minimums"
    # lend_unused_minimums, and a maximum does not evict while the window has room: what every
    # partition left after growing to its maximum is lent to those whose items did not fit.
    LEND_UNUSED_ROOM = "lend_unused_room"


class SourceLimitMode(StrEnum):
    EXCERPT_WITH_LINE_RANGE = "excerpt_with_line_range"
    FAILURES_PLUS_ARTIFACT_REF = "failures_plus_artifact_ref"
    RELEVANT_SECTIONS_PLUS_HASH = "relevant_sections_plus_hash"
    WHOLE = "whole"


class TransformType(StrEnum):
    NONE = "none"
    TRUNCATE_ITEM = "truncate_item"
    EXCERPT = "excerpt"
    SUMMARIZE = "summarize"
    DECISION_COMPRESS = "decision_compress"
    # A superseded write's call arguments (the old plan text, the old file body) elided in the
    # payload, naming the later write (ctxeng.engine.elision; issue 47).
    ELIDE_SUPERSEDED = "elide_superseded"
    # Not a context-shaping transform a policy chooses: security_policy_compliance redacts
    # credential-like spans under `secret_material: deny_or_redact`, and records it like one.
    REDACT = "redact"


class PreserveKey(StrEnum):
    """What a transform must keep (seed §6 `required_after_transform`, policy `transforms.preserve`)."""

    GOAL = "goal"
    CONSTRAINTS = "constraints"
    HARD_CONSTRAINTS = "hard_constraints"
    CURRENT_STAGE = "current_stage"
    DONE_IN_PROGRESS_BLOCKED = "done_in_progress_blocked"
    OPEN_ITEMS = "open_items"
    SOURCE_REFS = "source_refs"
    SOURCE_REFS_AND_REVISIONS = "source_refs_and_revisions"
    EXACT_VALUES_AND_ERRORS = "exact_values_and_errors"
    CONFLICTS_AND_NEGATIVE_FINDINGS = "conflicts_and_negative_findings"
    UNRESOLVED_TOOL_CALLS = "unresolved_tool_calls"
    ARTICLE_DRAFT_REVISION = "article_draft_revision"
    ARTIFACT_REFS = "artifact_refs"
    ARTIFACT_AND_CHECKPOINT_REFS = "artifact_and_checkpoint_refs"
    INPUT_ITEMS = "input_items"


# --------------------------------------------------------------------------- policy clause vocabularies
# Every list-valued policy clause takes its values from one of these enums, so a value the engine
# does not act on is refused by the validator (`expiry.on[0]: unknown value 'sunset'`), never
# accepted and ignored. docs/conformance.md maps each value to the code that acts on it.


class RevisionSource(StrEnum):
    """Who may assert a required revision (seed §10 `revision_authority`); never a retrieval result."""

    TASK_SPEC = "task_spec"
    ARTIFACT_MANIFEST = "artifact_manifest"
    RUNTIME_BUSINESS_STATE = "runtime_business_state"


class SourceCategory(StrEnum):
    """Retrieval source categories of `retrieval.*_sources`; `SOURCE_CATEGORY_TYPES` maps them to source types."""

    REPOSITORY = "repository"
    OFFICIAL_DOCS = "official_docs"
    ARTIFACTS = "artifacts"
    TRACE = "trace"
    MEMORY = "memory"


SOURCE_CATEGORY_TYPES: dict[SourceCategory, tuple[str, ...]] = {
    SourceCategory.REPOSITORY: ("repository_source", "repository"),
    SourceCategory.OFFICIAL_DOCS: ("official_document", "web_document", "web_page"),
    SourceCategory.ARTIFACTS: ("editable_project_file", "artifact"),
    SourceCategory.TRACE: ("trace",),
    SourceCategory.MEMORY: ("memory_object",),
}


class RetrievalCheck(StrEnum):
    """`retrieval.require`: each is a hard gate that runs on every item (gates cannot be removed)."""

    STABLE_SOURCE_REF = "stable_source_ref"
    SCOPE_CHECK = "scope_check"
    REVISION_CHECK = "revision_check"


class StructurePreserve(StrEnum):
    """`structure.preserve`: properties the renderer keeps on every block, checked after rendering."""

    SOURCE_LINEAGE = "source_lineage"
    TOOL_CALL_RESULT_PAIR = "tool_call_result_pair"
    REVISION = "revision"
    TRUST = "trust"
    INTENDED_ROLE = "intended_role"
    RESULT_STATUS = "result_status"


class SerializationPreserve(StrEnum):
    """`serialization.preserve`: properties every adapter keeps, checked on the serialized payload."""

    MESSAGE_ROLES = "message_roles"
    TOOL_DEFINITIONS = "tool_definitions"
    TOOL_CALL_RESULT_PAIR = "tool_call_result_pair"
    INSTRUCTION_DATA_BOUNDARY = "instruction_data_boundary"


class SecurityAssessment(StrEnum):
    """`security.required_assessments`: each performed by security_policy_compliance, each recorded."""

    EXTERNAL_INSTRUCTION_ISOLATION = "external_instruction_isolation"
    SECRET_HANDLING = "secret_handling"
    CROSS_SCOPE_CHECK = "cross_scope_check"


class CacheIdentityField(StrEnum):
    ORDERED_SOURCE_IDS = "ordered_source_ids"
    SOURCE_CONTENT_HASHES = "source_content_hashes"
    CONTEXT_POLICY_REVISION = "context_policy_revision"
    RUNTIME_POLICY_REVISION = "runtime_policy_revision"


class InvalidationCause(StrEnum):
    CONTEXT_POLICY_REVISION = "context_policy_revision"
    RUNTIME_POLICY_CHANGE = "runtime_policy_change"
    PERMISSION_CHANGE = "permission_change"
    PROJECT_RULE_CHANGE = "project_rule_change"
    STABLE_SOURCE_IDENTITY_CHANGE = "stable_source_identity_change"


class ExternalizationTarget(StrEnum):
    """Where context may be externalized and re-injected from (seed §7: never Memory)."""

    ARTIFACT_STORE = "artifact_store"
    FILE = "file"
    CHECKPOINT = "checkpoint"


# The source types whose items come from each externalization target.
EXTERNALIZATION_SOURCE_TYPES: dict[ExternalizationTarget, tuple[str, ...]] = {
    ExternalizationTarget.FILE: ("editable_project_file",),
    ExternalizationTarget.CHECKPOINT: ("checkpoint_summary",),
}


class ReinjectionClause(StrEnum):
    """`reinjection.require` (seed §7): what a re-injected artifact must pass, each recorded."""

    OBJECT_IDENTITY = "object_identity"
    WRITER_AND_SOURCE = "writer_and_source"
    CONTENT_HASH_AND_REVISION = "content_hash_and_revision"
    SCOPE_AND_PERMISSION = "scope_and_permission"
    FRESHNESS_OR_REFRESH = "freshness_or_refresh"
    TRUST_LABEL = "trust_label"
    TRUST_ROLE_COMPATIBILITY = "trust_role_compatibility"
    STRUCTURAL_INTEGRITY = "structural_integrity"
    SECURITY_CLASSIFICATION = "security_classification"
    SECURITY_POLICY_COMPLIANCE = "security_policy_compliance"
    ADMISSION_REASON = "admission_reason"


class LifecycleEvent(StrEnum):
    """`expiry.on` and `request.lifecycle_events[].event`."""

    SOURCE_EXPIRED = "source_expired"
    REVISION_REPLACED = "revision_replaced"
    PERMISSION_REVOKED = "permission_revoked"
    TASK_CLOSED = "task_closed"


class UnresolvedCallHandling(StrEnum):
    SYNTHETIC_RESULT = "synthetic_result"
    OMIT_CALL = "omit_call"


class CacheStatus(StrEnum):
    HIT = "hit"
    MISS = "miss"
    BYPASSED = "bypassed"


ARTIFACT_KINDS = (
    "research_plan",
    "source_records",
    "evidence_pack",
    "article_draft",
    "review_decision",
    "publish_receipt",
)


class TransformTrigger(StrEnum):
    """`transforms.trigger`: which pressure lets a transform run (recorded in every TransformRecord).

    `over_source_limit`: an item is over its source type's limit (`source_limits`), so it is
    reduced at the source. `over_partition`: items of a partition do not fit its budget, so a
    `structured_summary` partition replaces them with the structured checkpoint summary.
    """

    OVER_PARTITION_OR_SOURCE_LIMIT = "over_partition_or_source_limit"
    OVER_SOURCE_LIMIT = "over_source_limit"
    OVER_PARTITION = "over_partition"
