"""Stage 8 — seal: ready or blocked, and the ContextAssemblyManifest.

Contract: the assembly is blocked when a resident kind (policy `resident.include`) or a required
item has no included item, when the partition minimums cannot be reserved, or when a required
transform failed. A blocked manifest carries `blocked_reason`, the missing parts, every earlier
stage record, and no input of any kind: no input hashes, no cache prefix hash or identity
(`cache.cache_record`), no framing count; no rendered or serialized input exists. What it keeps of
candidate text is evidence of a decision, never input: `transforms[].before_excerpt` /
`after_excerpt` show what a transform was given and made, so a reviewer sees why its assertions
failed. A ready manifest carries
`assembly_input_hash` (the rendered assembly input) and `serialized_model_input_hash` (the
adapter's payload), both sha256 over canonical JSON.
"""

from __future__ import annotations

from typing import Any

from .budget import Allocation, borrowed_by_partition, final_usage
from .cache import payload_sha256
from .gates import current_draft
from .hashing import (
    canonical_json,
    canonical_json_composed,
    canonical_json_kept,
    sha256_json,
    sha256_object_growing,
    sha256_text,
)
from .memo import Memo
from .models import (
    NOT_APPROVAL_TRUST,
    AdapterIdentity,
    ApprovalSource,
    ArgumentRedaction,
    ArtifactRefRecord,
    AssemblyHeader,
    BudgetRecord,
    CandidateRecord,
    ConflictRecord,
    ContextAssemblyManifest,
    ExcludedRecord,
    IncludedRecord,
    PartitionUsage,
    PolicyIdentity,
    StageRecord,
    ToolPairRecord,
)
from .ranking import stage_kind_matches
from .render import serialized_pairs
from .vocabulary import ARTIFACT_KINDS, AssemblyStatus, BlockedReason
from .working import Assembly, Candidate


def check_required(asm: Assembly) -> None:
    included_kinds = {c.item.kind for c in asm.alive()}
    missing = [k for k in asm.policy.resident.include if k not in included_kinds]
    if missing:
        asm.block(BlockedReason.REQUIRED_PARTITION_MISSING, missing, "resident parts missing: " + ", ".join(missing))
    for cand in asm.candidates:
        if cand.item.required and not cand.alive and cand.exclusion and cand.exclusion.stage != "transforms":
            asm.block(BlockedReason.REQUIRED_PARTITION_MISSING, [cand.item_id], f"required item {cand.item_id} was {cand.exclusion.reason.value}")
    for name, part in asm.policy.budget.partitions.items():
        if part.required and not any(c.partition == name for c in asm.alive()):
            asm.block(BlockedReason.REQUIRED_PARTITION_MISSING, [name], f"required partition {name} is empty")
    stage = asm.policy.stages.get(asm.request.stage)
    for kind in stage.require if stage is not None else ():
        source = stage.approved_by.get(kind)  # type: ignore[union-attr]
        present = [c for c in asm.alive() if stage_kind_matches(c, kind)]
        problems = {c.item_id: approval_problem(asm, c, source) for c in present} if source is not None else {}
        if not any(problems.get(c.item_id) is None for c in present):
            why = "; ".join(f"{i}: {p}" for i, p in problems.items())
            asm.block(
                BlockedReason.REQUIRED_PARTITION_MISSING,
                [kind],
                f"stages.{asm.request.stage}.require: no admitted {kind}"
                + (f" from an approval source of stages.{asm.request.stage}.approved_by.{kind} ({why})" if why else "")
                + " (seed §3: loaded and checked before this stage, and only then)",
            )


def approval_problem(asm: Assembly, cand: Candidate, source: ApprovalSource) -> str | None:
    """Why an admitted approval does not count (seed §3, §7: an independent object bound to the draft
    revision, its content hash and the publish destination), or None when it does."""
    item = cand.item
    if item.source_type not in source.source_types:
        return f"source type {item.source_type!r} is not an approval source ({', '.join(source.source_types)})"
    if item.producer not in source.producers:
        return f"producer {item.producer!r} is not a named approver ({', '.join(source.producers)})"
    if item.producer == asm.request.principal.id:
        return f"produced by the agent itself ({item.producer!r})"
    if cand.trust is None or cand.trust in NOT_APPROVAL_TRUST:
        return f"trust {cand.trust.value if cand.trust else 'none'} is data, not an approval"
    ref = item.source_ref
    unbound = [f for f in ("draft_revision", "draft_content_hash", "destination") if ref.get(f) in (None, "")]
    if unbound:
        return f"binds no {' and no '.join(unbound)}"
    want_revision, want_hash = current_draft(asm)
    if want_revision is None or want_hash is None:
        return "the current article_draft (revision and content hash) is not among the candidates, so the binding cannot be checked"
    if str(ref["draft_revision"]) != str(want_revision) or ref["draft_content_hash"] != want_hash:
        return f"approves draft {ref['draft_revision']!r} ({ref['draft_content_hash']}); the current draft is {want_revision!r} ({want_hash})"
    state = asm.request.runtime_state
    destination = state.publish_destination if state is not None else None
    if destination is None:
        return "the request states no publish destination (runtime_state.publish_destination) to bind"
    if str(ref["destination"]) != destination:
        return f"approves publishing to {ref['destination']!r}; this step publishes to {destination!r}"
    return None


def budget_record(asm: Assembly, included: list[Candidate], alloc: Allocation, framing: int | None) -> BudgetRecord:
    b = asm.policy.budget
    used, counts = final_usage(asm, included)
    borrowed = borrowed_by_partition(b, alloc.usable, used)
    estimated = sum(used.values())
    return BudgetRecord(
        model_context_limit=alloc.context_limit,
        response_reserve=b.response_reserve,
        protocol_overhead=b.protocol_overhead,
        safety_margin=b.safety_margin,
        usable_input=alloc.usable_input,
        estimated_used=estimated,
        framing_reserved=alloc.framing_reserved,
        framing_tokens=framing,
        payload_tokens=None if framing is None else estimated + framing,
        borrowing=b.borrowing,
        partitions={
            name: PartitionUsage(
                used=used[name],
                minimum=p.minimum,
                maximum=p.maximum,
                eviction=p.eviction,
                items=counts[name],
                above_minimum=max(0, used[name] - p.minimum),
                borrowed=borrowed[name],
            )
            for name, p in b.partitions.items()
        },
    )


# The candidate records, kept by everything each is made of (issue 48): an agent's step records
# nearly every candidate of the step before with the same fields, and each record's validation was a
# few percent of the step. The key is the record's whole input as the engine holds it (the
# source_ref by `_flat`, each value with its exact JSON type; enums as members); an item whose
# source_ref holds anything but scalars, or that carries an artifact reference, is recorded without
# the memo (a list or object inside could be the caller's own, changed in place after it was kept).
# Records are frozen, so one record may stand in many manifests. (The included records are not
# kept: each carries its rank, which moves at every step as new messages rank first, and a copy
# with the new rank cost what validating it does.)
_CANDIDATE_RECORDS: Memo[CandidateRecord] = Memo(16_384)


def _flat(mapping: dict) -> tuple | None:
    """A JSON object of scalars as part of a key: its keys and values in order, each value with its
    exact type (`1`, `True`, `1.0` and `"1"` are four keys; -0.0 keeps its sign, by `repr`); None
    when a value is not a plain JSON scalar."""
    flat: list = []
    for k, v in mapping.items():
        t = type(v)
        if t is float:
            v = repr(v)
        elif not (t is str or t is int or t is bool or v is None):
            return None
        flat += (k, t, v)
    return tuple(flat)


def _candidate_record(c: Candidate) -> CandidateRecord:
    i = c.received or c.item  # the candidate as received, before any source-limit reduction
    tokens = c.exact_original_tokens if c.counted else c.floor
    ref = _flat(i.source_ref)
    if ref is None or i.artifact_ref is not None:
        return _new_candidate_record(c)
    key = (i.item_id, i.kind, i.source_type, ref, i.source_request_id, i.producer, i.content_hash, type(i.revision), i.revision,
           i.scope, i.freshness, c.trust, i.intended_role, i.security_class, i.completeness, type(tokens), tokens, c.counted)
    return _CANDIDATE_RECORDS.kept(key, lambda: _new_candidate_record(c))


def _new_candidate_record(c: Candidate) -> CandidateRecord:
    i = c.received or c.item
    return CandidateRecord(
        item_id=i.item_id,
        kind=i.kind,
        source_type=i.source_type,
        source_ref=i.source_ref,
        source_request_id=i.source_request_id,
        producer=i.producer,
        content_hash=i.content_hash,
        revision=i.revision,
        scope=i.scope,
        freshness=i.freshness,
        trust=c.trust,
        intended_role=i.intended_role,
        security_class=i.security_class,
        completeness=i.completeness,
        estimated_tokens=c.exact_original_tokens if c.counted else c.floor,
        token_count="exact" if c.counted else "lower_bound",
        artifact_ref=i.artifact_ref,
    )


def _included_record(c: Candidate) -> IncludedRecord:
    i = c.item
    return IncludedRecord(
        item_id=i.item_id,
        kind=i.kind,
        source_type=i.source_type,
        source_ref=i.source_ref,
        source_lineage=i.source_lineage,
        content_hash=i.content_hash,
        revision=i.revision,
        scope=i.scope,
        trust=c.trust,  # type: ignore[arg-type]
        intended_role=i.intended_role,
        zone=c.zone,  # type: ignore[arg-type]
        security_class=i.security_class,
        hard_gate_results=c.gate_results,
        security_assessment=c.security_assessment,
        reinjection_checks=c.reinjection_checks,
        admission_reason=c.admission_reason,
        load_mode=c.load_mode,  # type: ignore[arg-type]
        partition=c.partition or "",
        tokens=c.tokens,
        rank=c.rank,
        transform_record_id=c.transform_record_id,
        call_id=i.call_id,
        evidence_use=c.evidence_use,
        turn=i.turn,
        producer_check=c.producer_check,
    )


def _excluded_tokens(c: Candidate) -> int:
    """The item's tokens when it was excluded: counted, or, for an item never counted, the lower
    bound the budget evicted it on (else its block's bound as received, `acquisition.measure`)."""
    if c.exact_tokens is not None:
        return c.exact_tokens
    ex = c.exclusion
    return ex.tokens_at_least if ex is not None and ex.tokens_at_least is not None else c.floor


def _excluded_record(c: Candidate) -> ExcludedRecord:
    i = c.item
    ex = c.exclusion
    assert ex is not None
    return ExcludedRecord(
        item_id=i.item_id,
        kind=i.kind,
        source_type=i.source_type,
        source_ref=i.source_ref,
        content_hash=i.content_hash,
        trust=c.trust,
        intended_role=i.intended_role,
        security_class=i.security_class,
        reason=ex.reason,
        hard_gate=ex.hard_gate,
        hard_gate_results=c.gate_results,
        security_assessment=c.security_assessment,
        reinjection_checks=c.reinjection_checks,
        detail=ex.detail,
        refresh_condition=ex.refresh_condition,
        partition=c.partition,
        tokens=_excluded_tokens(c),
        token_count="exact" if c.exact_tokens is not None else "lower_bound",
        failed_assertions=ex.failed_assertions,
        call_id=i.call_id,
        replaced_by=ex.replaced_by,
        producer_check=c.producer_check,
    )


def _tool_pair_records(asm: Assembly) -> list[ToolPairRecord]:
    out = []
    serialized_at = {id(p): n for n, p in enumerate(serialized_pairs(asm))}
    for pair in sorted(asm.pairs, key=lambda p: p.source_order):
        order = serialized_at.get(id(pair))
        result = pair.result
        if pair.evicted:
            decision = "excluded"
        elif pair.included and pair.resolved:
            decision = "included"
        else:
            decision = "unresolved"
        out.append(
            ToolPairRecord(
                call_id=pair.call.call_id,
                caller_call_id=pair.call.caller_call_id or pair.call.call_id,
                serialized_call_id=pair.serialized_call_id,
                tool_name=pair.call.tool_name,
                canonical_argument_hash=pair.canonical_argument_hash,
                result_item_id=result.item_id if result else None,
                result_hash=(result.received or result.item).content_hash if result else None,  # the result as received
                status=pair.call.status,
                pairing_assertion="exactly_one_result_for_call" if result else "no_result_for_call",
                evidence_use=pair.evidence_use,
                completed_seq=pair.call.completed_seq,
                source_order=pair.source_order,
                serialized_order=order,
                decision=decision,  # type: ignore[arg-type]
                unresolved_handling=pair.unresolved_handling,
                tokens=pair.tokens if pair.included else None,
                turn=pair.call.turn,
                argument_redactions=[ArgumentRedaction(path=path, detector=detector) for path, detector in pair.argument_redactions],
            )
        )
    return out


def _artifact_refs(included: list[Candidate]) -> list[ArtifactRefRecord]:
    refs = []
    for c in included:
        ref = c.item.source_ref
        if c.item.kind in ARTIFACT_KINDS or ref.get("artifact_id"):
            refs.append(
                ArtifactRefRecord(
                    kind=c.item.kind,
                    id=str(ref.get("artifact_id", c.item_id)),
                    revision=ref.get("revision", c.item.revision),
                    hash=c.item.content_hash,
                    item_id=c.item_id,
                )
            )
    return refs


def assembly_input_hash(assembly_input: dict[str, Any]) -> str:
    """`sha256_json(assembly_input)`, its text composed from each block's, pair's and turn's kept
    text (`hashing.canonical_json_composed`), the conversation's turns (its last key, and the part
    that grows) hashed through the kept sha256 states (`hashing.sha256_chain`): the same bytes, so
    the same hash."""
    keys = sorted(assembly_input)
    turns = assembly_input.get("transcript")
    if not keys or keys[-1] != "transcript" or type(turns) is not list or not all(type(k) is str for k in keys):
        return sha256_text(canonical_json_composed(assembly_input, 2))
    before = [canonical_json(k) + ":" + canonical_json_composed(assembly_input[k], 1) for k in keys[:-1]]
    return sha256_object_growing(before, "transcript", [canonical_json_kept(t) for t in turns], [])


def seal(
    asm: Assembly,
    *,
    adapter: Any,
    alloc: Allocation,
    framing: int | None,
    created_at: str,
    assembly_input: dict[str, Any] | None,
    serialized: dict[str, Any] | None,
    cache: Any,
    estimator: str,
    structure_checks: dict[str, Any] | None = None,
    serialization_checks: dict[str, Any] | None = None,
) -> ContextAssemblyManifest:
    blocked = asm.blocked_reason is not None
    included = [c for c in asm.alive()]
    excluded = [c for c in asm.candidates if not c.alive]
    excluded.sort(key=lambda c: c.order)
    included.sort(key=lambda c: c.order)
    req = asm.request
    header = AssemblyHeader(
        id="assembly-" + sha256_json([req.run_id, req.step_id, asm.candidate_set_digest, asm.policy_digest, adapter.name])[7:23],
        run_id=req.run_id,
        step_id=req.step_id,
        status=AssemblyStatus.BLOCKED if blocked else AssemblyStatus.READY,
        blocked_reason=asm.blocked_reason,
        missing=asm.missing,
        blocked_detail=asm.blocked_detail,
        policy=PolicyIdentity(id=asm.policy.policy.id, revision=asm.policy.policy.revision, digest=asm.policy_digest),
        model=req.model,
        adapter=AdapterIdentity(
            name=adapter.name,
            version=adapter.version,
            serialization_policy_version=asm.policy.serialization.policy_version
            if asm.policy.serialization.adapter == adapter.name
            else f"{adapter.name}/1",
        ),
        principal=req.principal,
        scope=req.scope,
        stage=req.stage,
        estimator=estimator,
        candidate_set_digest=asm.candidate_set_digest,
        assembly_input_hash=None if blocked or assembly_input is None else assembly_input_hash(assembly_input),
        serialized_model_input_hash=None if blocked or serialized is None else payload_sha256(serialized, asm.payload_unit_json),
        data_fence_nonce=asm.nonce,
        structure_checks=structure_checks or {},
        serialization_checks=serialization_checks or {},
        created_at=created_at,
    )
    return ContextAssemblyManifest(
        assembly=header,
        source_acquisition=list(req.source_acquisition),
        candidate_items=[_candidate_record(c) for c in sorted(asm.candidates, key=lambda c: c.order)],
        budget=budget_record(asm, included, alloc, framing),
        included=[_included_record(c) for c in included],
        excluded=[_excluded_record(c) for c in excluded],
        transforms=list(asm.transforms),
        tool_pairs=_tool_pair_records(asm),
        summaries=list(asm.summaries),
        artifact_refs=_artifact_refs(included),
        checkpoint_ref=req.checkpoint.summary_id if req.checkpoint else None,
        lifecycle_events=list(req.lifecycle_events),
        conflicts=[ConflictRecord(**c) for c in (asm.versions.conflicts if asm.versions is not None else [])],
        cache=cache,
        stages=[StageRecord(seq=s.seq, stage=s.stage, items_in=s.items_in, items_out=s.items_out, note=s.note) for s in asm.stages],
    )


def with_actual_usage(document: dict[str, Any], input_tokens: int) -> dict[str, Any]:
    """A copy of a sealed manifest (as JSON) showing the provider's actual input tokens beside the
    estimate (`budget.actual_input_tokens`), as the service serves it once usage is reported (seed
    §5, §10: filled in after the call). The sealed document is not changed: usage is an appended
    record, so every hash of the assembly (and a digest of the sealed document) stays what it was."""
    if (document.get("assembly") or {}).get("status") != "ready":
        raise ValueError("assembly: a blocked assembly produced no model input, so no call has usage to report")
    if isinstance(input_tokens, bool) or not isinstance(input_tokens, int) or input_tokens < 0:
        raise ValueError(f"input_tokens: {input_tokens!r} is not a count of tokens (a whole number, 0 or more)")
    return {**document, "budget": {**document["budget"], "actual_input_tokens": input_tokens}}
