"""The mutable working set the stages pass along, and nothing else.

Requests and policies are frozen pydantic models; a stage records its decision on a `Candidate`
(the item, its resolved trust, current content, tokens, gate results, partition ...) and the seal
stage turns the candidates into the frozen manifest. Keeping this one small module the only
mutable state makes "which stage decided what" easy to read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .models import AssemblyRequest, ContextItem, ContextPolicy, ToolCall, TransformRecord
from .tokens import Tokenizer
from .vocabulary import (
    EvidenceUse,
    ExclusionReason,
    HardGate,
    LoadMode,
    Role,
    Trust,
    UnresolvedCallHandling,
    Zone,
)


@dataclass
class Exclusion:
    reason: ExclusionReason
    detail: str
    stage: str
    hard_gate: HardGate | None = None
    refresh_condition: str | None = None
    failed_assertions: list[str] = field(default_factory=list)
    event: str | None = None  # the lifecycle event that excluded the item, if one did
    replaced_by: str | None = None  # the structured summary standing in for a budget-evicted item
    tokens_at_least: int | None = None  # evicted on this lower bound, never counted (budget, `bounds`)


@dataclass
class Candidate:
    item: ContextItem
    order: int
    content: str
    trust: Trust | None
    digest: str = ""  # sha256 of the content as received, computed once at inventory
    # sha256 of the current content once a transform (redaction, reduction) has replaced it; the
    # integrity gate keeps reading `digest`, the content as received.
    changed_digest: str | None = None
    # Exact counts: `tokens` is what the payload carries for the item now (render.block_tokens),
    # `original_tokens` the item as received. An item the budget may evict on a bound is not
    # counted at acquisition (`acquisition.measure`): `count_with` counts it the first time
    # either is read, and `floor` is a proven lower bound of its block until then (`bounds`).
    exact_tokens: int | None = None
    exact_original_tokens: int | None = None
    count_with: Callable[[Candidate], int] | None = field(default=None, repr=False, compare=False)
    floor: int = 0
    # A source limit the source-limit stage left to the budget (`source_limits.settle`): the item
    # is reduced only if the budget gets as far as needing its exact size.
    pending_limit: Any = None
    tie_group: Any = None  # ranking.TieGroup: uncounted, tied with others on every factor before retrieval_cost
    header_tokens: int = 0  # an estimate of the fence around the content, for sizing reductions only
    gate_results: dict[str, Any] = field(default_factory=dict)
    security_assessment: dict[str, str] = field(default_factory=dict)
    pinned: bool = False
    rank: int | None = None
    load_mode: LoadMode | None = None
    zone: Zone | None = None
    partition: str | None = None
    admission_reason: str = ""
    transform_record_id: str | None = None
    evidence_use: EvidenceUse | None = None
    exclusion: Exclusion | None = None
    stored_artifact: Any = None  # the artifact store's record, for an item re-injected by artifact_ref
    reinjection_checks: dict[str, Any] = field(default_factory=dict)
    # Set by source limits when the item is reduced: `item` becomes the derived item (narrowed
    # source_ref, excerpt lineage node, content hash of the output); `received` keeps the original.
    received: ContextItem | None = None
    result_status: Any = None  # a tool result's call status (ToolResultStatus), shown in its fence header
    built_by_engine: bool = False  # the structured summary the budget built: verified when built
    secret_findings: str = ""  # the security gate's credential findings by type (ctxeng.engine.secrets)
    producer_check: Any = None  # vocabulary.ProducerCheck, set by the trust_role_compatibility gate

    @property
    def item_id(self) -> str:
        return self.item.item_id

    @property
    def counted(self) -> bool:
        return self.exact_original_tokens is not None

    def _count_received(self) -> None:
        assert self.count_with is not None, f"{self.item_id}: never counted"
        n = self.count_with(self)
        self.exact_original_tokens = n
        if self.exact_tokens is None:
            self.exact_tokens = n

    @property
    def tokens(self) -> int:
        if self.exact_tokens is None:
            self._count_received()
        return self.exact_tokens  # type: ignore[return-value]

    @tokens.setter
    def tokens(self, n: int) -> None:
        # A new form's count is set after the form changed, so the item as received must have been
        # counted before (every transform reads `tokens` for its record's "before" first).
        assert self.exact_original_tokens is not None or self.count_with is None, f"{self.item_id}: changed before it was counted"
        self.exact_tokens = n

    @property
    def original_tokens(self) -> int | None:
        if self.exact_original_tokens is None and self.count_with is not None:
            self._count_received()
        return self.exact_original_tokens

    @original_tokens.setter
    def original_tokens(self, n: int | None) -> None:
        self.exact_original_tokens = n

    @property
    def content_digest(self) -> str:
        return self.changed_digest or self.digest

    @property
    def role(self) -> Role:
        return self.item.intended_role

    @property
    def alive(self) -> bool:
        return self.exclusion is None

    def exclude(self, exclusion: Exclusion) -> None:
        if self.exclusion is None:  # the first decision stands: nothing later rewrites a reason
            self.exclusion = exclusion


@dataclass
class ToolPair:
    """A call and (at most) one result, kept or evicted as one unit."""

    call: ToolCall
    source_order: int
    canonical_argument_hash: str
    serialized_call_id: str
    arguments_json: str
    result: Candidate | None
    evidence_use: EvidenceUse
    # What the payload carries for the call: its name, its arguments and its id (twice: on the
    # call and on the result message); a result's status is in its fence header.
    call_base_tokens: int = 0
    unresolved_handling: UnresolvedCallHandling | None = None
    synthetic_result: str | None = None
    synthetic_tokens: int = 0
    included: bool = False
    evicted: bool = False
    serialized_order: int | None = None
    # Credentials redacted from the payload's copy of the arguments: (field path, detector).
    argument_redactions: list[tuple[str, str]] = field(default_factory=list)

    @property
    def resolved(self) -> bool:
        return self.result is not None and self.result.alive

    @property
    def call_tokens(self) -> int:
        return self.call_base_tokens

    @property
    def tokens(self) -> int:
        if self.resolved:
            return self.call_tokens + self.result.tokens  # type: ignore[union-attr]
        return self.call_tokens + self.synthetic_tokens


@dataclass
class StageLog:
    seq: int
    stage: str
    items_in: int
    items_out: int
    note: str = ""
    # When the stage ended (time.perf_counter_ns), for tracing only: it never reaches the
    # manifest, so the sealed document stays deterministic.
    ended_ns: int = field(default_factory=time.perf_counter_ns, compare=False)


@dataclass
class Assembly:
    """Everything one assembly attempt knows while it runs."""

    request: AssemblyRequest
    policy: ContextPolicy
    policy_digest: str
    tokenizer: Tokenizer
    nonce: str
    candidate_set_digest: str
    candidates: list[Candidate] = field(default_factory=list)
    pairs: list[ToolPair] = field(default_factory=list)
    transforms: list[TransformRecord] = field(default_factory=list)
    stages: list[StageLog] = field(default_factory=list)
    blocked_reason: Any = None
    missing: list[str] = field(default_factory=list)
    blocked_detail: list[str] = field(default_factory=list)
    summaries: list[Any] = field(default_factory=list)
    artifact_store: Any = None  # callable (artifact_id, revision) -> StoredArtifact | None
    acquisitions: dict[str, Any] = field(default_factory=dict)  # source_request_id -> SourceAcquisition
    produced_by: dict[str, list[str]] = field(default_factory=dict)  # source_request_id -> content hashes of its items
    task_terms: set[str] | None = None  # words of the task items, read once by the source limits
    task_terms_key: str | None = None  # their digest, keying the windows the source limits remember
    started_ns: int = field(default_factory=time.perf_counter_ns, compare=False)  # tracing only, as StageLog.ended_ns
    scope_problems: dict[str, str | None] = field(default_factory=dict)  # scope -> why it is out of scope, judged once
    required_revisions: dict[str, Any] | None = None  # request.required_revision_map(), read once by the gate
    versions: Any = None  # versions.Verdict: the stale, duplicate and conflicting readings, judged once
    fence_tokens: int | None = None  # a block's tag prefix plus footer, counted once (render.fence_tokens)
    # The canonical JSON of each message (or input item) of the payload, made once by the cache
    # record (cache.payload_units) and read again by the seal's payload hash (cache.payload_sha256).
    payload_unit_json: dict[str, str] = field(default_factory=dict)
    # Where request.previous_cache came from (CacheRecord.previous_cache_from): the caller's
    # claim, or the service's own stored record of the run's previous step (pipeline.assemble).
    previous_cache_from: str = "request"

    def alive(self) -> list[Candidate]:
        return [c for c in self.candidates if c.exclusion is None]  # Candidate.alive, read directly: called per stage

    def by_id(self) -> dict[str, Candidate]:
        return {c.item_id: c for c in self.candidates}

    def log(self, stage: str, items_in: int, note: str = "") -> None:
        self.stages.append(StageLog(len(self.stages) + 1, stage, items_in, len(self.alive()), note))

    def block(self, reason: Any, missing: list[str], detail: str, cause: Any = None) -> None:
        """Block with one of the seed's two reasons; `cause` (a BlockedCause) heads the detail line."""
        if self.blocked_reason is None:
            self.blocked_reason = reason
        for m in missing:
            if m not in self.missing:
                self.missing.append(m)
        self.blocked_detail.append(detail if cause is None else f"{cause.value}: {detail}")
