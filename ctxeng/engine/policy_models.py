"""The context policy's wire format (`ContextPolicy`, seed §10) and the upgrade records of §8
(`ctxeng.engine.upgrades` reads these models; they import it only inside a validator).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from .limits import (
    MAX_ID,
    MAX_INT32,
    MAX_NAME,
    Id,
    PolicyId,
    is_blank,
)
from .model_base import Frozen, Int, Number
from .vocabulary import (
    AUTHORITY_TRUST,
    AcquisitionOutcome,
    Borrowing,
    CacheIdentityField,
    Eviction,
    ExclusionReason,
    ExternalizationTarget,
    Freshness,
    HardGate,
    InvalidationCause,
    LifecycleEvent,
    PreserveKey,
    RankingFactor,
    ReinjectionClause,
    RetrievalCheck,
    RevisionSource,
    Role,
    SecurityAssessment,
    SerializationPreserve,
    SourceCategory,
    SourceLimitMode,
    StructurePreserve,
    ToolResultStatus,
    TransformTrigger,
    TransformType,
    Trust,
    UnresolvedCallHandling,
)


class PolicyHeader(Frozen):
    id: PolicyId = Field(min_length=1, max_length=MAX_ID)
    revision: Int = Field(ge=1, le=MAX_INT32)
    digest: str | None = None


class PolicyScope(Frozen):
    task_type: str | None = None
    principal_policy: str | None = None


def _no_repeats(values: list[Any]) -> list[Any]:
    seen = set()
    for i, v in enumerate(values):
        if not isinstance(v, Hashable):
            continue  # a list or an object where a word belongs: the field's type refuses it by path
        if v in seen:
            raise ValueError(f"[{i}]: {getattr(v, 'value', v)!r} is listed twice")
        seen.add(v)
    return values


T = TypeVar("T")
# A list clause whose values may not repeat: `expiry.on[1]: 'task_closed' is listed twice`.
Unique = Annotated[list[T], AfterValidator(_no_repeats)]


def _all_of(values: list[Any], enum: type, why: str) -> list[Any]:
    """A clause that lists a fixed set the engine always enforces: it may reorder, never drop."""
    _no_repeats(values)
    missing = [m.value for m in enum if m not in values]
    if missing:
        raise ValueError(f"must include {', '.join(missing)} ({why})")
    return values


class RevisionAuthority(Frozen):
    required_revision_sources: Unique[RevisionSource] = Field(
        default_factory=lambda: list(RevisionSource),
        description="who may assert request.required_revisions; a revision from any other source is refused",
    )

    @field_validator("required_revision_sources")
    @classmethod
    def _some(cls, v: list[RevisionSource]) -> list[RevisionSource]:
        return _revision_authority_some(v)


def _revision_authority_some(v: list[RevisionSource]) -> list[RevisionSource]:
    if not v:
        raise ValueError("at least one revision authority required (otherwise no required revision can be asserted)")
    return v


class FreshnessPolicy(Frozen):
    states: Unique[Freshness] = Field(
        default_factory=lambda: list(Freshness),
        description="freshness states the policy recognizes; an item in any other state is unverifiable",
    )
    refresh_required: Literal["fetch_authoritative_source_before_admission"] = "fetch_authoritative_source_before_admission"
    expired: Literal["reject"] = "reject"
    unverifiable: Literal["reject_or_request_resolution", "reject"] = "reject_or_request_resolution"

    @field_validator("states")
    @classmethod
    def _valid_listed(cls, v: list[Freshness]) -> list[Freshness]:
        return _freshness_policy_valid_listed(v)


def _freshness_policy_valid_listed(v: list[Freshness]) -> list[Freshness]:
    if Freshness.VALID not in v:
        raise ValueError("must include 'valid' (otherwise no item could ever be admitted)")
    return v


class AcquisitionPolicy(Frozen):
    outcomes: Unique[AcquisitionOutcome] = Field(
        default_factory=lambda: list(AcquisitionOutcome),
        description="acquisition outcomes the policy records; a request reporting another is refused",
    )

    @field_validator("outcomes")
    @classmethod
    def _retrieved_listed(cls, v: list[AcquisitionOutcome]) -> list[AcquisitionOutcome]:
        return _acquisition_policy_retrieved_listed(v)


def _acquisition_policy_retrieved_listed(v: list[AcquisitionOutcome]) -> list[AcquisitionOutcome]:
    if AcquisitionOutcome.RETRIEVED not in v:
        raise ValueError("must include 'retrieved'")
    return v


class AdmissionPolicy(Frozen):
    hard_filters: list[HardGate] = Field(default_factory=lambda: list(HardGate))
    ranking: Unique[RankingFactor] = Field(default_factory=lambda: list(RankingFactor))
    exclusion_reasons: list[ExclusionReason] = Field(default_factory=lambda: list(ExclusionReason))
    min_relevance: Number = Field(default=0.0, ge=0.0, le=1.0, description="eligible items below it: ranking_lost")
    allow_incomplete: Unique[Literal["diagnostic"]] = Field(
        default_factory=list,
        description="[diagnostic]: a non-tool item marked partial or unknown enters as diagnostic_only; "
        "absent: it fails structural_integrity (tool results: structure.evidence_use_allowed_for)",
    )

    @field_validator("hard_filters")
    @classmethod
    def _all_gates(cls, v: list[HardGate]) -> list[HardGate]:
        # Every seed gate runs on every item: a policy may reorder the gates, never drop one
        # (without integrity a tampered object is admitted; without scope another project's data is).
        return _all_of(v, HardGate, "every hard gate runs on every item; a policy may reorder them, not drop one")

    @field_validator("exclusion_reasons")
    @classmethod
    def _all_reasons(cls, v: list[ExclusionReason]) -> list[ExclusionReason]:
        return _all_of(v, ExclusionReason, "the engine records every exclusion with its own reason; none can be switched off")


class TrustPolicy(Frozen):
    default_by_source: dict[str, Trust] = Field(
        default_factory=dict,
        description="the highest trust each source type may carry; a source type with none is untrusted data only",
    )
    producers: dict[Annotated[str, Field(min_length=1, max_length=MAX_NAME)], Unique[Annotated[str, Field(min_length=1)]]] = Field(
        default_factory=dict,
        description="authority source type -> the producers that may emit it; an item of that type from any other "
        "producer is hard_gate_rejected (trust_role_compatibility). A type without a list: producer_check not_configured",
    )

    @model_validator(mode="after")
    def _producers_for_authority_types(self) -> TrustPolicy:
        return _trust_policy_producers_for_authority_types(self)

    def unbound_authority_types(self) -> list[str]:
        """Authority source types without a producer list (each a validator warning)."""
        return [t for t, trust in self.default_by_source.items() if trust in AUTHORITY_TRUST and t not in self.producers]


def _trust_policy_producers_for_authority_types(policy: TrustPolicy) -> TrustPolicy:
    # A list for a data type would be a clause nothing acts on: its items are data whoever wrote them.
    for source_type, names in policy.producers.items():
        trust = policy.default_by_source.get(source_type)
        if trust not in AUTHORITY_TRUST:
            raise ValueError(
                f"producers.{source_type}: only authority source types (default trust control_authority, task_authority "
                f"or trusted_state in default_by_source) are bound to producers; {source_type!r} has "
                f"{trust.value if trust else 'no default'}"
            )
        if not names:
            raise ValueError(f"producers.{source_type}: list at least one producer (no item of the type could ever enter)")
        for j, name in enumerate(names):
            if is_blank(name):
                raise ValueError(f"producers.{source_type}[{j}]: a blank producer names nobody (an item with no producer identity would match it)")
    return policy


class SecurityPolicy(Frozen):
    external_instruction_text: Literal["isolate_as_data"] = "isolate_as_data"
    secret_material: Literal["deny_or_redact", "deny"] = Field(
        default="deny_or_redact",
        description="deny_or_redact: credential-like spans in content are redacted (a recorded transform); secret security classes are denied",
    )
    secrets_in_call_arguments: Literal["redact", "block"] = Field(
        default="redact",
        description="a credential in the agent's own tool-call arguments (its assistant turns, which the caller sends as they are): "
        "redact: only the span is replaced in the payload's copy of the arguments (still a JSON object of the same keys), each "
        "recorded in tool_pairs[].argument_redactions (field path, detector); block: the assembly is blocked naming the call and field",
    )
    cross_scope_data: Literal["deny"] = "deny"
    required_assessments: list[SecurityAssessment] = Field(default_factory=lambda: list(SecurityAssessment))
    secret_classes: list[str] = Field(default_factory=lambda: ["secret", "credential", "restricted_secret"])

    @field_validator("required_assessments")
    @classmethod
    def _all_assessments(cls, v: list[SecurityAssessment]) -> list[SecurityAssessment]:
        return _all_of(v, SecurityAssessment, "security_policy_compliance performs and records each on every item")


class ResidentPolicy(Frozen):
    include: list[str] = Field(default_factory=list, description="kinds resident at every step: an assembly without an admitted one is blocked")
    # Left out of the dump while empty, so a policy written before this clause keeps its digest.
    when_present: Unique[Annotated[str, Field(min_length=1, max_length=MAX_NAME)]] = Field(
        default_factory=list, exclude_if=lambda v: not v,
        description="kinds resident whenever the request carries one (pinned ahead of ranking, loaded resident, never lost "
        "to a relevance floor); unlike include, a step without one is not blocked (seed §3, §5: the protected constraint zone)",
    )

    @model_validator(mode="after")
    def _disjoint(self) -> ResidentPolicy:
        return _resident_policy_disjoint(self)


def _resident_policy_disjoint(resident: ResidentPolicy) -> ResidentPolicy:
    for i, kind in enumerate(resident.when_present):
        if kind in resident.include:
            raise ValueError(f"when_present[{i}]: {kind!r} is already in include (resident at every step)")
    return resident


class RetrievalPolicy(Frozen):
    default_sources: list[SourceCategory] = Field(default_factory=lambda: [SourceCategory.REPOSITORY, SourceCategory.OFFICIAL_DOCS, SourceCategory.ARTIFACTS])
    diagnostic_sources: list[SourceCategory] = Field(
        default_factory=lambda: [SourceCategory.TRACE],
        description="admitted only at a diagnostic stage or when the request names the item in diagnostic_item_ids",
    )
    governed_candidate_sources: list[SourceCategory] = Field(
        default_factory=lambda: [SourceCategory.MEMORY],
        description="admitted only in the roles role_limits gives their trust",
    )
    diagnostic_stages: list[str] = Field(default_factory=list, description="stages at which diagnostic sources are admitted")
    require: list[RetrievalCheck] = Field(default_factory=lambda: list(RetrievalCheck))

    @field_validator("require")
    @classmethod
    def _all_checks(cls, v: list[RetrievalCheck]) -> list[RetrievalCheck]:
        return _all_of(v, RetrievalCheck, "each is a hard gate every item passes; gates cannot be removed")

    @model_validator(mode="after")
    def _disjoint(self) -> RetrievalPolicy:
        return _retrieval_policy_disjoint(self)


def _retrieval_policy_disjoint(retrieval: RetrievalPolicy) -> RetrievalPolicy:
    seen: dict[SourceCategory, str] = {}
    for name in ("default_sources", "diagnostic_sources", "governed_candidate_sources"):
        for i, cat in enumerate(getattr(retrieval, name)):
            if cat in seen:
                raise ValueError(f"{name}[{i}]: {cat.value!r} is already in {seen[cat]}")
            seen[cat] = name
    return retrieval


class DisclosurePolicy(Frozen):
    mode: Literal["index_then_detail"] = "index_then_detail"
    indexes: list[str] = Field(default_factory=list)


class StructurePolicy(Frozen):
    preserve: list[StructurePreserve] = Field(default_factory=lambda: list(StructurePreserve))
    unresolved_tool_calls: UnresolvedCallHandling = UnresolvedCallHandling.SYNTHETIC_RESULT
    evidence_use_allowed_for: list[ToolResultStatus] = Field(
        default_factory=lambda: [ToolResultStatus.SUCCESS],
        description="result statuses that may serve as confirmed evidence; others are diagnostic_only",
    )


class SourceLimit(Frozen):
    """A per-source limit (seed §5): how items of one source type are reduced before budgeting."""

    default: SourceLimitMode
    max_tokens: Int | None = Field(
        default=None,
        gt=0,
        description="excerpt modes only: reduce an item over this many tokens (null = 1000); "
        "failures_plus_artifact_ref always reduces, whole never does",
    )

    @model_validator(mode="after")
    def _max_tokens_applies(self) -> SourceLimit:
        return _source_limit_max_tokens_applies(self)


def _source_limit_max_tokens_applies(limit: SourceLimit) -> SourceLimit:
    if limit.max_tokens is not None and limit.default in (SourceLimitMode.FAILURES_PLUS_ARTIFACT_REF, SourceLimitMode.WHOLE):
        raise ValueError(
            f"max_tokens: has no effect with {limit.default.value!r} (it applies to excerpt_with_line_range "
            "and relevant_sections_plus_hash)"
        )
    return limit


# Budget amounts (`budget.*`, `budget.partitions.*.minimum|maximum`): a token count, or a share of
# the effective context limit so one policy serves models of several sizes. A share is a
# percentage string ("12.5%", in (0, 100], at most six decimals) or a clamped share
# `{fraction: "10%", min: 1024, max: 8192}`. `BudgetPolicy.resolved` turns every amount into
# tokens once per assembly; shares round down.
PERCENT_SCALE = 10**8  # percentages are held in millionths of a percent: "12.5%" is 12_500_000
PERCENT_PATTERN = r"^[0-9]{1,3}(\.[0-9]{1,6})?%$"
MODEL_LIMIT = "model"


def percent_units(text: str) -> int | None:
    """`"12.5%"` in millionths of a percent (12_500_000); None when `text` is no percentage."""
    if not text.endswith("%"):
        return None
    whole, dot, decimals = text[:-1].partition(".")
    if not (whole.isascii() and whole.isdigit() and len(whole) <= 3):
        return None
    if dot and not (decimals.isascii() and decimals.isdigit() and len(decimals) <= 6):
        return None
    return int(whole) * 10**6 + int(decimals.ljust(6, "0") if dot else 0)


def _percent_text(units: int) -> str:
    whole, rest = divmod(units, 10**6)
    return f"{whole}.{rest:06d}".rstrip("0").rstrip(".") + "%"


def _check_percent(text: str) -> str:
    units = percent_units(text)
    if units is None:
        raise ValueError(f"{text!r} is neither a token count nor a percentage of the context limit such as '12.5%'")
    if not 0 < units <= PERCENT_SCALE:
        raise ValueError(f"{text!r}: a share of the context limit must be more than 0% and at most 100%")
    return text


_Percent = Annotated[str, Field(json_schema_extra={"pattern": PERCENT_PATTERN})]


class Share(Frozen):
    """A share of the context limit held within token bounds. Where a plain percentage would not
    do: `response_reserve` becomes the provider's `max_tokens`, which providers cap per model, so a
    tenth of a 1M window would be refused, and a tenth of an 8k window is too little to answer."""

    fraction: _Percent = Field(
        description="a percentage of the effective context limit, such as '10%'"
    )
    min: Int = Field(default=0, ge=0, description="tokens at least, whatever the context limit")
    max: Int | None = Field(default=None, gt=0, description="tokens at most; null = no bound")

    @field_validator("fraction")
    @classmethod
    def _a_percentage(cls, v: str) -> str:
        return _check_percent(v)

    @model_validator(mode="after")
    def _min_le_max(self) -> Share:
        return _share_min_le_max(self)

    def tokens(self, context_limit: int) -> int:
        share = context_limit * percent_units(self.fraction) // PERCENT_SCALE  # type: ignore[operator]
        return max(self.min, share) if self.max is None else min(self.max, max(self.min, share))


def _share_min_le_max(share: Share) -> Share:
    if share.max is not None and share.min > share.max:
        raise ValueError(f"min: {share.min} exceeds max {share.max}")
    return share


Amount = Annotated[Int, Field(ge=0)] | _Percent | Share
PositiveAmount = Annotated[Int, Field(gt=0)] | _Percent | Share


def amount_tokens(amount: int | str | Share, context_limit: int) -> int:
    """An amount in tokens at `context_limit` (a share rounds down)."""
    if isinstance(amount, Share):
        return amount.tokens(context_limit)
    if isinstance(amount, str):
        return context_limit * percent_units(amount) // PERCENT_SCALE  # type: ignore[operator]
    return amount


def _share_units(amount: int | str | Share | None) -> int:
    """The share of the context limit an amount takes as written (a token count takes none)."""
    if isinstance(amount, Share):
        return percent_units(amount.fraction) or 0
    if isinstance(amount, str):
        return percent_units(amount) or 0
    return 0


def _amount(value: Any, least: int) -> int | str | Share:
    """One budget amount, validated into one plain error (a union would report every branch)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # what an int field accepts
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int | str | dict | Share):
        raise ValueError("expected a token count, a percentage of the context limit such as '12.5%', or {fraction, min, max}")
    if isinstance(value, int):
        if value < least:  # pydantic's own words for an int field's bound
            raise ValueError("Input should be greater than 0" if least == 1 else "Input should be greater than or equal to 0")
        return value
    if isinstance(value, str):
        return _check_percent(value)
    if isinstance(value, dict):
        try:
            return Share.model_validate(value)
        except ValueError as exc:  # pydantic's ValidationError: name the share's own field
            errs = getattr(exc, "errors", None)
            if errs is None:
                raise
            first = errs(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"])
            msg = {"missing": "field required", "extra_forbidden": "unknown field"}.get(first["type"], first["msg"]).removeprefix("Value error, ")
            raise ValueError(f"{where}: {msg}" if where else msg) from None
    return value


class Partition(Frozen):
    minimum: Amount = Field(default=0, description="tokens (or a share of the context limit) kept for this partition")
    maximum: PositiveAmount | None = Field(default=None, description="tokens (or a share of the context limit) at most; null = no bound")
    eviction: Eviction = Eviction.REDUCE_CANDIDATES
    kinds: list[str] = Field(default_factory=list)
    required: bool = False

    @field_validator("minimum", mode="wrap")
    @classmethod
    def _minimum(cls, v: Any, handler: Any) -> Any:
        return _amount(v, 0)

    @field_validator("maximum", mode="wrap")
    @classmethod
    def _maximum(cls, v: Any, handler: Any) -> Any:
        return _partition_maximum(v)

    @model_validator(mode="after")
    def _min_le_max(self) -> Partition:
        return _partition_min_le_max(self)


def _partition_maximum(v: Any) -> Any:
    return None if v is None else _amount(v, 1)


def _partition_min_le_max(partition: Partition) -> Partition:
    # Amounts of the same form compare as written; a token minimum under a share maximum (or the
    # reverse) compares only at a context limit: `BudgetPolicy` checks it where the limit is
    # known, and an assembly whose model it fails is blocked.
    if isinstance(partition.minimum, int) and isinstance(partition.maximum, int) and partition.minimum > partition.maximum:
        raise ValueError(f"minimum {partition.minimum} exceeds maximum {partition.maximum}")
    if isinstance(partition.minimum, str) and isinstance(partition.maximum, str) and _share_units(partition.minimum) > _share_units(partition.maximum):
        raise ValueError(f"minimum {partition.minimum} exceeds maximum {partition.maximum}")
    return partition


class BudgetCalibration(Frozen):
    """`budget.calibration`: the margin kept for a model whose count is not exact (no public
    tokenizer, or an OpenAI name the model table does not know; `ctxeng.engine.estimators`). The
    usable input is divided by a factor: the `quantile` of actual / estimated input tokens over the
    model's usage reports once there are `min_reports` of them, `default_factor` until then."""

    quantile: Number = Field(default=0.95, gt=0, le=1, description="of the reports' actual/estimate ratios (nearest rank)")
    default_factor: Number = Field(default=1.15, ge=1, le=4, description="the factor while a model has fewer than min_reports reports")
    min_reports: Int = Field(default=5, ge=1, description="reports a model needs before its own ratios decide (the service reads its newest 500)")


class BudgetPolicy(Frozen):
    model_context_limit: Annotated[Int, Field(gt=0)] | Literal["model"] = Field(
        description="tokens, or 'model': the request's model.context_limit; with a number the smaller of the two is the effective limit"
    )
    response_reserve: PositiveAmount = Field(description="tokens kept for the answer (the provider's max_tokens); a provider call needs at least one")
    protocol_overhead: Amount
    safety_margin: Amount
    # A partition's name becomes part of the ids of what the budget derives (a structured summary,
    # its transform), so it is held to the id rule: printable characters only.
    partitions: dict[Annotated[Id, Field(min_length=1, max_length=MAX_NAME)], Partition]
    borrowing: Borrowing = Borrowing.PRESERVE_ALL_MINIMUMS
    calibration: BudgetCalibration | None = Field(
        default=None, description="the margin for models whose count is not exact; absent: quantile 0.95, default_factor 1.15, min_reports 5"
    )

    @model_serializer(mode="wrap")
    def _without_absent_calibration(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _budget_policy_without_absent_calibration(self, handler)

    @property
    def calibration_clause(self) -> BudgetCalibration:
        """The calibration clause in force: the policy's, else the documented defaults."""
        return _budget_policy_calibration_clause(self)

    @field_validator("model_context_limit", mode="wrap")
    @classmethod
    def _limit(cls, v: Any, handler: Any) -> Any:
        return _budget_policy_limit(v)

    @field_validator("response_reserve", mode="wrap")
    @classmethod
    def _reserve(cls, v: Any, handler: Any) -> Any:
        return _amount(v, 1)

    @field_validator("protocol_overhead", "safety_margin", mode="wrap")
    @classmethod
    def _overhead(cls, v: Any, handler: Any) -> Any:
        return _amount(v, 0)

    @property
    def relative(self) -> bool:
        """Does any amount depend on the model's context limit?"""
        return _budget_policy_relative(self)

    def context_limit(self, model_context_limit: int) -> int:
        """The effective context limit for a model of `model_context_limit` tokens."""
        if self.model_context_limit == MODEL_LIMIT:
            return model_context_limit
        return min(model_context_limit, self.model_context_limit)  # type: ignore[type-var]

    def resolved(self, model_context_limit: int) -> BudgetPolicy:
        """This budget in tokens for a model of `model_context_limit` tokens: every share taken of
        the effective context limit. An absolute budget is returned as it is. The result is not
        validated again: a budget that cannot hold at this size blocks the assembly (`budget`)."""
        if not self.relative:
            return self
        limit = self.context_limit(model_context_limit)
        parts = {
            name: p.model_copy(update={
                "minimum": amount_tokens(p.minimum, limit),
                "maximum": None if p.maximum is None else amount_tokens(p.maximum, limit),
            })
            for name, p in self.partitions.items()
        }
        return self.model_copy(update={
            "model_context_limit": limit if self.model_context_limit == MODEL_LIMIT else self.model_context_limit,
            "response_reserve": amount_tokens(self.response_reserve, limit),
            "protocol_overhead": amount_tokens(self.protocol_overhead, limit),
            "safety_margin": amount_tokens(self.safety_margin, limit),
            "partitions": parts,
        })

    def _problem(self) -> str | None:
        """Why this budget, in tokens (`resolved`), cannot hold, as `field: message`; None if it can."""
        usable = self.model_context_limit - self.response_reserve - self.protocol_overhead - self.safety_margin  # type: ignore[operator]
        if usable <= 0:
            return "model_context_limit: leaves no usable input budget after reserve, overhead and margin"
        if not self.partitions:
            return "partitions: at least one partition required"
        if self.response_reserve < 1:  # type: ignore[operator]
            return "response_reserve: comes to 0 tokens; a provider call needs at least one for the answer"
        for name, p in self.partitions.items():
            if p.maximum is not None and p.minimum > p.maximum:  # type: ignore[operator]
                return f"partitions.{name}.minimum: {p.minimum} exceeds its maximum {p.maximum}"
        total_min = sum(p.minimum for p in self.partitions.values())  # type: ignore[misc]
        if total_min > usable:
            return f"partitions: minimums sum to {total_min}, more than the usable budget {usable}"
        return None

    def _shares_leave_room(self) -> None:
        """The shares as written: reserve, overhead and margin leave some input, and the partitions'
        minimums fit in what they leave (a clamped share counts with its fraction)."""
        reserved = 0
        for name in ("response_reserve", "protocol_overhead", "safety_margin"):
            reserved += _share_units(getattr(self, name))
            if reserved >= PERCENT_SCALE:
                raise ValueError(
                    f"{name}: response_reserve, protocol_overhead and safety_margin take {_percent_text(reserved)} "
                    "of the context limit, leaving no usable input"
                )
        left, taken = PERCENT_SCALE - reserved, 0
        for name, p in self.partitions.items():
            taken += _share_units(p.minimum)
            if taken > left:
                raise ValueError(
                    f"partitions.{name}.minimum: the partition minimums take {_percent_text(taken)} of the context limit, "
                    f"more than the {_percent_text(left)} that response_reserve, protocol_overhead and safety_margin leave"
                )

    @model_validator(mode="after")
    def _consistent(self) -> BudgetPolicy:
        return _budget_policy_consistent(self)


def _budget_policy_without_absent_calibration(budget: BudgetPolicy, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
    # An absent clause is not written out, so every policy written before the clause existed
    # keeps its body and its digest.
    body = handler(budget)
    if budget.calibration is None and isinstance(body, dict):
        body.pop("calibration", None)
    return body


def _budget_policy_calibration_clause(budget: BudgetPolicy) -> BudgetCalibration:
    return budget.calibration if budget.calibration is not None else BudgetCalibration()


def _budget_policy_limit(v: Any) -> Any:
    if v == MODEL_LIMIT:
        return v
    if isinstance(v, str) and not (v.isascii() and v.isdigit()):
        raise ValueError(f"{v!r}: expected a token count or 'model' (the request's model.context_limit)")
    return _amount(v, 1)


def _budget_policy_relative(budget: BudgetPolicy) -> bool:
    amounts = [budget.response_reserve, budget.protocol_overhead, budget.safety_margin]
    amounts += [a for p in budget.partitions.values() for a in (p.minimum, p.maximum) if a is not None]
    return budget.model_context_limit == MODEL_LIMIT or not all(isinstance(a, int) for a in amounts)


def _budget_policy_consistent(budget: BudgetPolicy) -> BudgetPolicy:
    if budget.relative:
        budget._shares_leave_room()
    if budget.model_context_limit == MODEL_LIMIT:
        if not budget.partitions:
            raise ValueError("partitions: at least one partition required")
    else:
        # Checked at the largest context the policy allows; a smaller model's assembly that the
        # budget cannot hold is blocked (required_partition_missing, cause budget_exhausted).
        problem = budget.resolved(budget.model_context_limit)._problem()  # type: ignore[arg-type]
        if problem is not None:
            raise ValueError(problem + (f" (at model_context_limit {budget.model_context_limit})" if budget.relative else ""))
    owner: dict[str, str] = {}
    for name, part in budget.partitions.items():
        for kind in part.kinds:
            if kind in owner:
                raise ValueError(f"partitions.{name}.kinds: kind {kind!r} already in partition {owner[kind]!r}")
            owner[kind] = name
    # Unlisted kinds go to the first partition evicted `first`, else to the last partition.
    fallback = next((n for n, p in budget.partitions.items() if p.eviction == Eviction.FIRST), list(budget.partitions)[-1])
    for name, part in budget.partitions.items():
        if not part.kinds and name != fallback:
            raise ValueError(f"partitions.{name}.kinds: lists no kinds, so no item can ever be budgeted in it")
        if part.eviction == Eviction.COMPLETE_PAIR_ONLY and not {"tool_call", "tool_result"} & set(part.kinds):
            raise ValueError(
                f"partitions.{name}.eviction: 'complete_pair_only' acts on tool pairs; list tool_call or tool_result in its kinds"
            )
    return budget


# A policy chooses among these; `redact` belongs to security_policy_compliance, not to `allowed`.
POLICY_TRANSFORMS = (
    TransformType.NONE,
    TransformType.TRUNCATE_ITEM,
    TransformType.EXCERPT,
    TransformType.SUMMARIZE,
    TransformType.DECISION_COMPRESS,
    TransformType.ELIDE_SUPERSEDED,
)


def _one_of(value: Any, allowed: tuple[Any, ...], what: str) -> Any:
    if isinstance(value, str) and value not in {a.value for a in allowed}:
        names = ", ".join(a.value for a in allowed)
        raise ValueError(f"{value!r} is not {what} ({names})")
    return value


class TransformPolicy(Frozen):
    """`transforms`: which transforms may run, when, and what each must preserve (seed §6)."""

    trigger: TransformTrigger = Field(
        default=TransformTrigger.OVER_PARTITION_OR_SOURCE_LIMIT,
        description="over_source_limit: source-limit reductions only; over_partition: structured "
        "summaries of over-budget partitions only; over_partition_or_source_limit: both",
    )
    allowed: list[TransformType] = Field(default_factory=lambda: [TransformType.NONE])
    preserve: list[PreserveKey] = Field(default_factory=list)

    @field_validator("trigger", mode="before")
    @classmethod
    def _known_trigger(cls, v: Any) -> Any:
        return _one_of(v, tuple(TransformTrigger), "a trigger the engine acts on")

    @field_validator("allowed", mode="before")
    @classmethod
    def _known_transforms(cls, v: Any) -> Any:
        return _transform_policy_known_transforms(v)

    @field_validator("preserve", mode="before")
    @classmethod
    def _known_preserve(cls, v: Any) -> Any:
        return _transform_policy_known_preserve(v)

    def runs(self, transform: TransformType, trigger: TransformTrigger) -> bool:
        """May `transform` run when `trigger` fires? Both the allow-list and the trigger must say yes."""
        if transform not in self.allowed:
            return False
        return self.trigger == TransformTrigger.OVER_PARTITION_OR_SOURCE_LIMIT or self.trigger == trigger


def _transform_policy_known_transforms(v: Any) -> Any:
    if isinstance(v, list):
        for i, t in enumerate(v):
            try:
                _one_of(t.value if isinstance(t, TransformType) else t, POLICY_TRANSFORMS, "a transform a policy may allow")
            except ValueError as exc:
                raise ValueError(f"[{i}]: {exc}") from None
        _no_repeats(v)
    return v


def _transform_policy_known_preserve(v: Any) -> Any:
    if isinstance(v, list):
        for i, k in enumerate(v):
            try:
                _one_of(k.value if isinstance(k, PreserveKey) else k, tuple(PreserveKey), "a preservation assertion the engine checks")
            except ValueError as exc:
                raise ValueError(f"[{i}]: {exc}") from None
        _no_repeats(v)
    return v


class SerializationPolicy(Frozen):
    adapter: Literal["openai_chat", "anthropic_messages", "openai_responses"] = "openai_chat"
    policy_version: str = "openai-chat/1"
    preserve: list[SerializationPreserve] = Field(default_factory=lambda: list(SerializationPreserve))

    @field_validator("preserve")
    @classmethod
    def _all_kept(cls, v: list[SerializationPreserve]) -> list[SerializationPreserve]:
        return _all_of(v, SerializationPreserve, "every adapter keeps each one, checked on the payload it produces")


class CachePolicy(Frozen):
    stable_prefix_sources: list[str] = Field(default_factory=lambda: ["system_policy"])
    identity: Unique[CacheIdentityField] = Field(
        default_factory=lambda: list(CacheIdentityField), description="exactly the fields the prefix identity is computed from"
    )
    invalidate_on: Unique[InvalidationCause] = Field(
        default_factory=lambda: list(InvalidationCause), description="each cause turns a would-be hit into a miss, recorded"
    )
    # Left out of the dump while false, so a policy written before this clause keeps its digest.
    prompt_cache_key: bool = Field(
        default=False,
        exclude_if=lambda v: v is False,
        description="OpenAI adapters: send a prompt_cache_key derived from the prefix identity (routes steps sharing the stable prefix to the same cache)",
    )

    @field_validator("identity")
    @classmethod
    def _identity_some(cls, v: list[CacheIdentityField]) -> list[CacheIdentityField]:
        return _cache_policy_identity_some(v)


def _cache_policy_identity_some(v: list[CacheIdentityField]) -> list[CacheIdentityField]:
    if not v:
        raise ValueError("at least one identity field required")
    return v



class ExternalizationPolicy(Frozen):
    targets: Unique[ExternalizationTarget] = Field(
        default_factory=lambda: list(ExternalizationTarget),
        description="where context may be externalized and re-injected from; items from another target are rejected",
    )

    @field_validator("targets", mode="before")
    @classmethod
    def _not_memory(cls, v: Any) -> Any:
        return _externalization_policy_not_memory(v)


def _externalization_policy_not_memory(v: Any) -> Any:
    if isinstance(v, list):
        for i, t in enumerate(v):
            if t == "memory":
                raise ValueError(f"[{i}]: 'memory' is not an externalization target: context never writes to Memory (seed §7)")
    return v


class ReinjectionPolicy(Frozen):
    require: Unique[ReinjectionClause] = Field(
        default_factory=lambda: list(ReinjectionClause),
        description="clauses a re-injected artifact must pass, each checked and recorded",
    )


class ExpiryPolicy(Frozen):
    on: Unique[LifecycleEvent] = Field(
        default_factory=lambda: list(LifecycleEvent), description="lifetime events the engine acts on; a request may carry only these"
    )


FAILURE_PATTERN = r"^(blocked: (required_partition_missing|transform_blocked)( \([a-z_]+\))?|[^:\s][^:]*: (excluded [a-z_]+|[a-z_]+ failed))$"


class RevocationCondition(Frozen):
    """`upgrades[].revoke_when` (seed §8: an upgrade carries the condition for taking it back out):
    met when at least `at_least` of the newest `of_last` assemblies under the policy (any
    revision) show the failure `shows` (a failure line as `ctxeng.engine.upgrades.failure_lines` reads it from a
    manifest). The product evaluates it from manifests and shows met / not met."""

    shows: str = Field(pattern=FAILURE_PATTERN, max_length=MAX_NAME * 2,
                       description="a failure line: `blocked: <reason>`, `blocked: <reason> (<cause>)`, `<item>: <assertion> failed`, `<item>: excluded <reason>`; `*` for any item")
    at_least: Int = Field(ge=1, le=10_000)
    of_last: Int = Field(ge=1, le=10_000, description="how many of the policy's newest assemblies are read")

    @model_validator(mode="after")
    def _window(self) -> RevocationCondition:
        return _revocation_condition_window(self)


def _revocation_condition_window(condition: RevocationCondition) -> RevocationCondition:
    if condition.at_least > condition.of_last:
        raise ValueError(f"at_least: {condition.at_least} is more than of_last {condition.of_last}: the condition could never be met")
    return condition


class UpgradeRecord(Frozen):
    """One entry of `upgrades` (seed §8): why a mechanism was added, and when to take it back out."""

    mechanism: str = Field(description="the mechanism path it adds: `transforms.allowed.decision_compress`, `budget.partitions.state.eviction` (ctxeng.engine.upgrades)")
    addresses: list[str] = Field(min_length=1, description="ids of the assemblies whose confirmed failures it addresses (the service checks they are the tenant's and that each shows the failure `shows`)")
    failure: str = Field(description="the failure it solves")
    shows: str = Field(pattern=FAILURE_PATTERN, max_length=MAX_NAME * 2,
                       description="the failure as each addressed manifest records it: `blocked: <reason>`, `blocked: <reason> (<cause>)`, "
                       "`<item>: <assertion> failed`, `<item>: excluded <reason>`; `*` for any item")
    new_failure_modes: str = Field(description="the errors it may bring")
    cost: str = Field(description="its running cost")
    revocation: str = Field(description="when to roll it back, in words")
    revoke_when: RevocationCondition = Field(description="when to roll it back, as a condition the product evaluates from manifests")

    @field_validator("mechanism", "failure", "new_failure_modes", "cost", "revocation")
    @classmethod
    def _said(cls, v: str) -> str:
        return _upgrade_record_said(v)

    @field_validator("addresses")
    @classmethod
    def _assembly_ids(cls, v: list[str]) -> list[str]:
        return _upgrade_record_assembly_ids(v)


def _upgrade_record_said(v: str) -> str:
    if not v.strip():
        raise ValueError("must not be blank: an upgrade records what it is for")
    return v


def _upgrade_record_assembly_ids(v: list[str]) -> list[str]:
    for i, a in enumerate(v):
        if not a.strip():
            raise ValueError(f"[{i}]: an assembly id must not be blank")
    return _no_repeats(v)


# Item kinds that are approvals (seed §3, §7: an independent object, not a file the agent wrote):
# a stage requiring one must say who may give it (`stages.<stage>.approved_by`).
APPROVAL_KINDS = ("review_decision",)
# Trust classes an approval source may not carry: data anyone in the project (the agent included)
# can write, or what was derived from such data.
NOT_APPROVAL_TRUST = (Trust.PROJECT_EDITABLE, Trust.DERIVED_CONTEXT, Trust.GOVERNED_MEMORY_CANDIDATE,
                      Trust.REPOSITORY_EVIDENCE, Trust.EXTERNAL_EVIDENCE)


class ApprovalSource(Frozen):
    """`stages.<stage>.approved_by.<kind>`: who may give an approval the stage requires."""

    source_types: Unique[Annotated[str, Field(min_length=1, max_length=MAX_NAME)]] = Field(
        min_length=1, description="source types an approval may come from; each with a trust default that is not data (trust.default_by_source)"
    )
    producers: Unique[Annotated[str, Field(min_length=1, max_length=MAX_NAME)]] = Field(
        min_length=1, description="the principals that may give it; never the agent (scope.principal_policy, the request's principal)"
    )

    @field_validator("producers")
    @classmethod
    def _named(cls, v: list[str]) -> list[str]:
        return _approval_source_named(v)


def _approval_source_named(v: list[str]) -> list[str]:
    for j, name in enumerate(v):
        if is_blank(name):
            raise ValueError(f"[{j}]: a blank producer names nobody (an item with no producer identity would match it)")
    return v


class StagePolicy(Frozen):
    """`stages.<stage>`: what the stage needs and what it does not read (seed §3). Values are item
    kinds or source types (`review_decision`, `publish_receipt`)."""

    approved_by: dict[Annotated[str, Field(min_length=1, max_length=MAX_NAME)], ApprovalSource] = Field(
        default_factory=dict,
        description="for each approval kind in `require`: the approval source the policy names; a review from any other "
        "source, from the agent, or not binding the draft revision, content hash and publish destination does not count",
    )

    require: Unique[Annotated[str, Field(min_length=1, max_length=MAX_NAME)]] = Field(
        default_factory=list, description="an admitted item of each is required: none -> blocked required_partition_missing"
    )
    not_relevant: Unique[Annotated[str, Field(min_length=1, max_length=MAX_NAME)]] = Field(
        default_factory=list, description="items of these kinds lose ranking at this stage unless asked for in diagnostic_item_ids"
    )


class ContextPolicy(Frozen):
    policy_schema_version: Literal["context-policy/v1"] = "context-policy/v1"
    policy: PolicyHeader
    scope: PolicyScope = Field(default_factory=PolicyScope)
    revision_authority: RevisionAuthority = Field(default_factory=RevisionAuthority)
    freshness: FreshnessPolicy = Field(default_factory=FreshnessPolicy)
    source_acquisition: AcquisitionPolicy = Field(default_factory=AcquisitionPolicy)
    admission: AdmissionPolicy = Field(default_factory=AdmissionPolicy)
    trust: TrustPolicy = Field(default_factory=TrustPolicy)
    role_limits: dict[Trust, list[Role]]
    security: SecurityPolicy = Field(default_factory=SecurityPolicy)
    resident: ResidentPolicy = Field(default_factory=ResidentPolicy)
    retrieval: RetrievalPolicy = Field(default_factory=RetrievalPolicy)
    disclosure: DisclosurePolicy = Field(default_factory=DisclosurePolicy)
    structure: StructurePolicy = Field(default_factory=StructurePolicy)
    source_limits: dict[str, SourceLimit] = Field(default_factory=dict)
    budget: BudgetPolicy
    transforms: TransformPolicy = Field(default_factory=TransformPolicy)
    serialization: SerializationPolicy = Field(default_factory=SerializationPolicy)
    cache: CachePolicy = Field(default_factory=CachePolicy)
    externalization: ExternalizationPolicy = Field(default_factory=ExternalizationPolicy)
    reinjection: ReinjectionPolicy = Field(default_factory=ReinjectionPolicy)
    expiry: ExpiryPolicy = Field(default_factory=ExpiryPolicy)
    upgrades: list[UpgradeRecord] = Field(
        default_factory=list,
        description="seed §8: the record of each mechanism added over the revision this one replaces (ctxeng.engine.upgrades)",
    )


    stages: dict[Annotated[str, Field(min_length=1, max_length=MAX_NAME)], StagePolicy] = Field(
        default_factory=dict, description="per request.stage: artifact kinds it requires, kinds not relevant at it"
    )

    @model_validator(mode="after")
    def _approvals_are_independent(self) -> ContextPolicy:
        """Seed §3, §7: a required approval comes from a source the policy names, never from the
        agent or from data it can write."""
        return _context_policy_approvals_are_independent(self)

    @model_validator(mode="after")
    def _stage_kinds_consistent(self) -> ContextPolicy:
        return _context_policy_stage_kinds_consistent(self)

    @property
    def label(self) -> str:
        return _context_policy_label(self)

    @model_validator(mode="after")
    def _upgrades_name_own_mechanisms(self) -> ContextPolicy:
        return _context_policy_upgrades_name_own_mechanisms(self)


def _context_policy_approvals_are_independent(policy: ContextPolicy) -> ContextPolicy:
    for stage, rules in policy.stages.items():
        for i, kind in enumerate(rules.require):
            if kind in APPROVAL_KINDS and kind not in rules.approved_by:
                raise ValueError(
                    f"stages.{stage}.require[{i}]: {kind!r} is an approval; name who may give it in "
                    f"stages.{stage}.approved_by.{kind} (source_types, producers): an approval is an independent object"
                )
        for kind, source in rules.approved_by.items():
            if kind not in rules.require:
                raise ValueError(f"stages.{stage}.approved_by.{kind}: {kind!r} is not in stages.{stage}.require, so nothing acts on it")
            for j, source_type in enumerate(source.source_types):
                trust = policy.trust.default_by_source.get(source_type)
                if trust is None or trust in NOT_APPROVAL_TRUST:
                    raise ValueError(
                        f"stages.{stage}.approved_by.{kind}.source_types[{j}]: {source_type!r} has trust "
                        f"{trust.value if trust else 'none (untrusted data)'}; an approval source must not be data the agent can write or derive"
                    )
            for j, producer in enumerate(source.producers):
                if producer == policy.scope.principal_policy:
                    raise ValueError(f"stages.{stage}.approved_by.{kind}.producers[{j}]: {producer!r} is the agent this policy governs; it cannot approve itself")
    return policy


def _context_policy_stage_kinds_consistent(policy: ContextPolicy) -> ContextPolicy:
    for stage, rules in policy.stages.items():
        for i, kind in enumerate(rules.not_relevant):
            if kind in policy.resident.include:
                raise ValueError(f"stages.{stage}.not_relevant[{i}]: {kind!r} is a resident.include kind, resident at every stage")
            if kind in rules.require:
                raise ValueError(f"stages.{stage}.not_relevant[{i}]: {kind!r} is also in stages.{stage}.require")
    return policy


def _context_policy_label(policy: ContextPolicy) -> str:
    return f"{policy.policy.id}/{policy.policy.revision}"


def _context_policy_upgrades_name_own_mechanisms(policy: ContextPolicy) -> ContextPolicy:
    from .upgrades import mechanisms  # it reads this model

    own = mechanisms(policy)
    seen: dict[str, int] = {}
    for i, record in enumerate(policy.upgrades):
        if record.mechanism not in own:
            raise ValueError(
                f"upgrades[{i}].mechanism: {record.mechanism!r} is not a mechanism of this policy "
                f"(one of: {', '.join(sorted(own))})"
            )
        if record.mechanism in seen:
            raise ValueError(f"upgrades[{i}].mechanism: {record.mechanism!r} is already recorded in upgrades[{seen[record.mechanism]}]")
        seen[record.mechanism] = i
    return policy
