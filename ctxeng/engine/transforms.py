"""Stage 7 — transforms with preservation assertions (seed §6).

Contract: a summary is a derived object, never a fact. Every admitted summary (kind `summary` or
source type `model_summary` / `checkpoint_summary`) is verified deterministically against the
policy's `transforms.preserve` list before it may enter the working set:

- goal, constraints, current stage, done/in progress/blocked, conflicts and negative findings,
  artifact refs: the structured section is present;
- open_items: every open item id the runtime knows is carried (in `preserves.open_item_ids` and
  in the text);
- source_refs(_and_revisions): at least one source ref, each pinned to a revision or commit;
- unresolved_tool_calls: every call still without a result is named;
- article_draft_revision: present, and equal to the runtime's when the runtime states it;
- exact_values_and_errors: every error line of an input item that is among the candidates is kept;
- input_items (always): explicit input item ids, and the range's ends are among them.

A failed assertion excludes the summary as `transform_blocked`, naming the failed assertions; if
the summary was required (a resident kind or `required: true`) the assembly is blocked. Trust
never rises: the output's trust may not rank above the inputs' it derives from. The deterministic
structured checkpoint summary (seed §6) is built here from `request.checkpoint`.
"""

from __future__ import annotations

import re

from .hashing import sha256_json, sha256_text
from .models import CheckpointState, ContextItem, SummaryRecord, TransformRecord
from .source_limits import FAILURE_LINE, _excerpt
from .vocabulary import (
    TRUST_RANK,
    AssertionResult,
    BlockedReason,
    ExclusionReason,
    PreserveKey,
    Role,
    TransformType,
    Trust,
)
from .working import Assembly, Candidate, Exclusion

SUMMARY_SOURCE_TYPES = ("model_summary", "checkpoint_summary")
CHECKPOINT_TRANSFORMER = "checkpoint-summarizer/v1"

_SECTIONS = {
    PreserveKey.GOAL: r"^\s*goal\s*:",
    PreserveKey.CONSTRAINTS: r"^\s*(hard\s+)?constraints\s*:",
    PreserveKey.HARD_CONSTRAINTS: r"^\s*(hard\s+)?constraints\s*:",
    PreserveKey.CURRENT_STAGE: r"^\s*current\s+stage\s*:",
    PreserveKey.DONE_IN_PROGRESS_BLOCKED: r"^\s*done\s*/\s*in\s+progress\s*/\s*blocked\s*:",
    PreserveKey.CONFLICTS_AND_NEGATIVE_FINDINGS: r"^\s*conflicts(\s+and\s+negative\s+findings)?\s*:",
    PreserveKey.ARTIFACT_REFS: r"^\s*artifact(\s*/\s*checkpoint)?\s+refs\s*:",
    PreserveKey.ARTIFACT_AND_CHECKPOINT_REFS: r"^\s*artifact(\s*/\s*checkpoint)?\s+refs\s*:",
}


def is_summary(item: ContextItem) -> bool:
    """A derived summary to verify; a tool result is the tool's own output, paired, never one of these."""
    return item.call_id is None and (item.kind == "summary" or item.source_type in SUMMARY_SOURCE_TYPES)


def expected_open_items(asm: Assembly) -> list[str]:
    state = asm.request.runtime_state
    if state is not None and state.open_item_ids is not None:
        return list(state.open_item_ids)
    ids: list[str] = []
    for cand in asm.alive():
        if not is_summary(cand.item) and cand.item.open_item_ids:
            ids.extend(i for i in cand.item.open_item_ids if i not in ids)
    return ids


def expected_draft_revision(asm: Assembly):
    state = asm.request.runtime_state
    if state is not None and state.article_draft_revision is not None:
        return state.article_draft_revision
    for cand in asm.alive():
        if cand.item.kind == "article_draft" and cand.item.revision is not None:
            return cand.item.revision
    return None


def check_summary(asm: Assembly, cand: Candidate) -> dict[str, AssertionResult]:
    item = cand.item
    text = cand.content
    preserves = item.preserves or {}
    results: dict[str, AssertionResult] = {}
    P, F, NA = AssertionResult.PASSED, AssertionResult.FAILED, AssertionResult.NOT_APPLICABLE
    # Calls still waiting for a result; a pair the budget evicted whole is resolved, just not shown.
    unresolved = [p.call.call_id for p in asm.pairs if p.unresolved_handling is not None]
    by_id = asm.by_id()
    for key in asm.policy.transforms.preserve:
        if key in _SECTIONS:
            results[key.value] = P if re.search(_SECTIONS[key], text, re.I | re.M) else F
        elif key == PreserveKey.OPEN_ITEMS:
            carried = set(preserves.get("open_item_ids") or [])
            want = expected_open_items(asm)
            results[key.value] = P if all(i in carried and i in text for i in want) and carried else F
        elif key in (PreserveKey.SOURCE_REFS, PreserveKey.SOURCE_REFS_AND_REVISIONS):
            refs = item.source_refs or []
            results[key.value] = P if refs and all(r.get("commit") or r.get("revision") for r in refs) else F
        elif key == PreserveKey.UNRESOLVED_TOOL_CALLS:
            carried = set(preserves.get("unresolved_tool_calls") or [])
            results[key.value] = P if all(c in carried or c in text for c in unresolved) else F
        elif key == PreserveKey.ARTICLE_DRAFT_REVISION:
            have = preserves.get("article_draft_revision")
            want = expected_draft_revision(asm)
            results[key.value] = P if have is not None and (want is None or str(have) == str(want)) else F
        elif key == PreserveKey.EXACT_VALUES_AND_ERRORS:
            inputs = [by_id[i] for i in (item.input_item_ids or []) if i in by_id]
            if not inputs:
                results[key.value] = NA
            else:
                errors = [ln.strip() for c in inputs for ln in c.item.content.splitlines() if FAILURE_LINE.search(ln)] if all(c.item.content for c in inputs) else []
                results[key.value] = P if all(e in text for e in errors) else F
        elif key == PreserveKey.INPUT_ITEMS:
            pass  # checked below for every summary
        else:
            results[key.value] = NA
    ids = item.input_item_ids or []
    rng = item.input_range
    results["input_items"] = P if ids and (rng is None or (rng.start_item_id in ids and rng.end_item_id in ids)) else F
    results["trust_not_raised"] = P if _trust_not_raised(asm, cand) else F
    return results


def _trust_not_raised(asm: Assembly, cand: Candidate) -> bool:
    if cand.trust is None:
        return False
    by_id = asm.by_id()
    inputs = [by_id[i].trust for i in (cand.item.input_item_ids or []) if i in by_id and by_id[i].trust]
    ceiling = max((TRUST_RANK[t] for t in inputs), default=TRUST_RANK[Trust.DERIVED_CONTEXT])  # type: ignore[index]
    return TRUST_RANK[cand.trust] <= max(ceiling, TRUST_RANK[Trust.DERIVED_CONTEXT])


def verify_summaries(asm: Assembly) -> None:
    for cand in list(asm.candidates):
        if not is_summary(cand.item) or cand.exclusion is not None and cand.exclusion.stage == "hard_gates":
            continue
        if not cand.alive:
            continue
        assertions = check_summary(asm, cand)
        failed = [k for k, v in assertions.items() if v == AssertionResult.FAILED]
        record_id = f"transform-{cand.item_id}-summarize"
        transformer = CHECKPOINT_TRANSFORMER if cand.item.source_type == "checkpoint_summary" else f"supplied:{cand.item.producer or 'unknown'}"
        input_ids = list(cand.item.input_item_ids or [])
        input_digest = sha256_json(input_ids)
        asm.transforms.append(
            TransformRecord(
                record_id=record_id,
                type=TransformType.SUMMARIZE,
                input_item_ids=input_ids,
                input_range=cand.item.input_range,
                input_digest=input_digest,
                objective="restore_current_research_state",
                policy_version=asm.policy.label,
                transformer_version=transformer,
                output_item_id=cand.item_id,
                output_digest=None if failed else cand.item.content_hash,
                preservation_assertions=assertions,
                token_estimate_before=cand.tokens,
                token_estimate_after=None if failed else cand.tokens,
                trust_before="mixed_admitted_sources",
                trust_after=cand.trust.value if cand.trust else "unlabelled",
                status="blocked" if failed else "verified",
                before_excerpt="",
                after_excerpt=_excerpt(cand.content),
            )
        )
        cand.transform_record_id = record_id
        if failed:
            cand.exclude(
                Exclusion(
                    ExclusionReason.TRANSFORM_BLOCKED,
                    "preservation assertions failed: " + ", ".join(failed),
                    "transforms",
                    failed_assertions=failed,
                )
            )
            if cand.item.required or cand.item.kind in asm.policy.resident.include:
                asm.block(BlockedReason.TRANSFORM_BLOCKED, [cand.item_id], f"required summary {cand.item_id} failed: {', '.join(failed)}")
        asm.summaries.append(
            SummaryRecord(
                summary_id=str(cand.item.source_ref.get("summary_id", cand.item_id)),
                item_id=cand.item_id,
                input_item_ids=input_ids,
                input_range=cand.item.input_range,
                input_digest=input_digest,
                transform_record_id=record_id,
                preservation_assertions=assertions,
                decision="excluded" if failed else "included",
            )
        )


def _lines(items: list[str]) -> str:
    return "; ".join(items) if items else "none"


def render_checkpoint(state: CheckpointState) -> str:
    """The structured checkpoint summary of seed §6, one section per line, deterministic."""
    claims = [f"{c.claim} [{_ref_label(c.source_ref)}]" for c in state.confirmed_claims]
    return "\n".join(
        [
            f"Goal: {state.goal}",
            f"Constraints: {_lines(state.constraints)}",
            f"Current Stage: {state.current_stage}",
            f"Done / In Progress / Blocked: done: {_lines(state.done)} | in progress: {_lines(state.in_progress)} | blocked: {_lines(state.blocked)}",
            f"Confirmed Claims: {_lines(claims)}",
            f"Conflicts and Negative Findings: {_lines(state.conflicts_and_negative_findings)}",
            f"Open Items: {', '.join(state.open_item_ids) if state.open_item_ids else 'none'}",
            f"Draft Revision: {state.draft_revision if state.draft_revision is not None else 'none'}",
            f"Unresolved Tool Calls: {', '.join(state.unresolved_tool_calls) if state.unresolved_tool_calls else 'none'}",
            f"Next Steps: {_lines(state.next_steps)}",
            f"Artifact / Checkpoint Refs: {', '.join(state.artifact_refs) if state.artifact_refs else 'none'}",
        ]
    )


def _ref_label(ref: dict) -> str:
    if ref.get("repo"):
        return f"{ref.get('repo')}@{ref.get('commit', '?')}:{ref.get('path', '')}:{ref.get('lines', '')}"
    return ",".join(f"{k}={v}" for k, v in sorted(ref.items()))


def checkpoint_item(state: CheckpointState, *, scope: str) -> ContextItem:
    """Build the checkpoint summary as a candidate; it then passes every gate like any other."""
    content = render_checkpoint(state)
    preserves: dict = {"open_item_ids": list(state.open_item_ids), "unresolved_tool_calls": list(state.unresolved_tool_calls)}
    if state.draft_revision is not None:
        preserves["article_draft_revision"] = state.draft_revision
    return ContextItem(
        item_id=state.summary_id,
        kind="summary",
        source_type="checkpoint_summary",
        source_ref={"summary_id": state.summary_id},
        producer=CHECKPOINT_TRANSFORMER,
        content=content,
        content_hash=sha256_text(content),
        scope=scope,
        trust=Trust.DERIVED_CONTEXT,
        intended_role=Role.DERIVED_CONTEXT,
        input_item_ids=list(state.input_item_ids),
        input_range=state.input_range,
        source_refs=[c.source_ref for c in state.confirmed_claims],
        preserves=preserves,
    )
