"""Stage 7 — transforms with preservation assertions (seed §6).

Contract: a summary is a derived object, never a fact. Every admitted summary (kind `summary` or
source type `model_summary` / `checkpoint_summary`) is verified deterministically against the
policy's `transforms.preserve` list before it may enter the working set:

- goal, constraints, current stage, done/in progress/blocked, artifact refs: the structured
  section is present;
- open_items: every open item id the runtime knows is carried (in `preserves.open_item_ids` and
  in the text);
- source_refs(_and_revisions): at least one source ref, each pinned to a revision or commit;
- unresolved_tool_calls: every call still without a result is named;
- article_draft_revision: present, and equal to the runtime's when the runtime states it;
- exact_values_and_errors: every error line of an input item that is among the candidates is kept;
- conflicts_and_negative_findings: the section is present, and every negative finding of an input
  the engine can read reappears with the same search scope, never as "does not exist" / "no such"
  (`findings`; passed only when every input was read, else not_applicable unless it failed);
- input_items (always): explicit input item ids, and the range's ends are among them.

A policy whose `transforms.allowed` lacks `summarize` admits no summary (`summarize_allowed:
failed`). Every summary is also checked against its inputs, whatever the policy lists: `producer_present`;
`inputs_resolve` (each input id is a candidate or an artifact in the store, and admissible: a
candidate a hard gate excluded, or a stored artifact out of scope or at another revision than the
one required, fails it; ids outside the request are accepted only as a declared `input_range` of
earlier history, or as the runtime's own checkpoint, and the assertion is then `not_applicable`,
never `passed`); and
`source_refs_within_inputs` (each source ref points inside one of its inputs' refs). The
TransformRecord's `input_digest` hashes the inputs' contents (`[[id, content_hash | null], ...]`),
not their ids.

A failed assertion excludes the summary as `transform_blocked`, naming the failed assertions; if
the summary was required (a resident kind or `required: true`) the assembly is blocked. Trust
never rises: the output's trust may not rank above that of the inputs actually admitted
(`gates.admitted_input_trusts`), which the record's `trust_before` states.

Two deterministic summaries are built here (seed §6): the checkpoint summary of
`request.checkpoint` (a candidate like any other), and the *structured summary* the budget uses
when a `structured_summary` partition is over budget (`structured_summary`): built from the
evicted items and `request.checkpoint`, `transformer_version: ctxeng-structured/1`, with
assertions comparing its text to facts read from the evicted items (it carries their negative
findings, scope included, in its `Conflicts and Negative Findings` line).
"""

from __future__ import annotations

import re

from . import findings
from .gates import admitted_input_trusts, cross_scope_problem
from .hashing import sha256_json, sha256_text
from .limits import is_blank
from .models import (
    CheckpointState,
    ContextItem,
    JudgedStatement,
    LineageNode,
    NegativeFindingsCheck,
    SummaryRecord,
    TransformRecord,
)
from .render import block_tokens
from .source_limits import FAILURE_LINE, _excerpt
from .vocabulary import (
    ROLE_ZONE,
    TRUST_RANK,
    AssertionResult,
    BlockedReason,
    ExclusionReason,
    LoadMode,
    PreserveKey,
    Role,
    TransformType,
    Trust,
)
from .working import Assembly, Candidate, Exclusion

SUMMARY_SOURCE_TYPES = ("model_summary", "checkpoint_summary")
CHECKPOINT_TRANSFORMER = "checkpoint-summarizer/v1"

# Section headings, searched with re.I | re.M in untrusted text of any size: indentation is
# `[^\S\n]*`, never `\s*`, which crosses newlines and rescans a run of blank lines from each of
# its line starts (quadratic: 80 KB of newlines took 50 s). A heading after blank lines is found at
# its own line start instead; the section it opens is the same.
_SECTIONS = {
    PreserveKey.GOAL: r"^[^\S\n]*goal\s*:",
    PreserveKey.CONSTRAINTS: r"^[^\S\n]*(hard\s+)?constraints\s*:",
    PreserveKey.HARD_CONSTRAINTS: r"^[^\S\n]*hard\s+constraints\s*:",
    PreserveKey.CURRENT_STAGE: r"^[^\S\n]*current\s+stage\s*:",
    PreserveKey.DONE_IN_PROGRESS_BLOCKED: r"^[^\S\n]*done\s*/\s*in\s+progress\s*/\s*blocked\s*:",
    PreserveKey.CONFLICTS_AND_NEGATIVE_FINDINGS: r"^[^\S\n]*conflicts(\s+and\s+negative\s+findings)?\s*:",
    PreserveKey.ARTIFACT_REFS: r"^[^\S\n]*artifact(\s*/\s*checkpoint)?\s+refs\s*:",
    PreserveKey.ARTIFACT_AND_CHECKPOINT_REFS: r"^[^\S\n]*artifact(\s*/\s*checkpoint)?\s+refs\s*:",
}


# Any `Heading:` line: where the previous section's body ends (indented as _SECTIONS are; the blank
# lines before it, which `\s*` put in the match, are stripped from the body either way).
_ANY_HEADING = re.compile(r"^[^\S\n]*[A-Za-z][A-Za-z /]{0,60}:", re.M)


def section_body(pattern: str, text: str) -> str | None:
    """The text of the section whose heading matches `pattern`: the rest of its heading line and the
    lines up to the next heading; None when there is no such heading."""
    heading = re.search(pattern, text, re.I | re.M)
    if heading is None:
        return None
    rest = text[heading.end() :]
    line_end = rest.find("\n")
    same_line, after = (rest, "") if line_end < 0 else (rest[:line_end], rest[line_end + 1 :])
    nxt = _ANY_HEADING.search(after)
    return (same_line + "\n" + (after[: nxt.start()] if nxt else after)).strip()


def mentions_id(identifier: str, text: str) -> bool:
    """`identifier` occurs in `text` as a whole id: `OI-1` is not carried by `OI-10` or `XOI-1`."""
    return re.search(rf"(?<![\w-]){re.escape(identifier)}(?![\w-])", text) is not None


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
        if key == PreserveKey.CONFLICTS_AND_NEGATIVE_FINDINGS:
            results[key.value] = _negative_findings_kept(asm, cand)
        elif key in _SECTIONS:
            # The section must be there and say something: an empty `Goal:` preserves no goal.
            results[key.value] = P if section_body(_SECTIONS[key], text) else F
        elif key == PreserveKey.OPEN_ITEMS:
            # Every open item the runtime (or the admitted state) knows, named in `preserves` and as
            # a whole id in the text; none open on either side is carried trivially and truly.
            carried = set(preserves.get("open_item_ids") or [])
            want = expected_open_items(asm)
            results[key.value] = P if all(i in carried and mentions_id(i, text) for i in want) else F
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
            # Graded on the inputs whose text the engine holds: a missing error line fails; all kept
            # passes only when every input could be read, else the check was partial: not_applicable.
            ids_in = item.input_item_ids or []
            readable = [c for i in ids_in if (c := by_id.get(i)) is not None and (c.received or c.item).content is not None]
            errors = [ln.strip() for c in readable for ln in ((c.received or c.item).content or "").splitlines() if FAILURE_LINE.search(ln)]
            if not all(e in text for e in errors):
                results[key.value] = F
            elif readable and len(readable) == len(ids_in):
                results[key.value] = P
            else:
                results[key.value] = NA
        elif key == PreserveKey.INPUT_ITEMS:
            pass  # checked below for every summary
        else:
            results[key.value] = NA
    ids = item.input_item_ids or []
    rng = item.input_range
    results["input_items"] = P if ids and (rng is None or (rng.start_item_id in ids and rng.end_item_id in ids)) else F
    results["trust_not_raised"] = P if _trust_not_raised(asm, cand) else F
    results["producer_present"] = F if is_blank(item.producer) else P
    inputs, unresolved = resolve_inputs(asm, cand)
    if not ids:
        results["inputs_resolve"] = F
    elif inadmissible_inputs(asm, cand):
        results["inputs_resolve"] = F
    elif not unresolved:
        results["inputs_resolve"] = P
    else:
        # Ids outside this request are accepted only as a declared stretch of earlier history
        # (seed §6: an explicit start/end range), which the engine cannot see: not checkable.
        results["inputs_resolve"] = NA if _history_inputs(asm, cand) else F
    refs = item.source_refs or []
    if not refs or unresolved or not ids:
        results["source_refs_within_inputs"] = NA
    else:
        parents = [r for ref in inputs.values() for r in ref[1]]
        results["source_refs_within_inputs"] = P if all(any(ref_within(r, p) for p in parents) for r in refs) else F
    return results


def _input_texts(asm: Assembly, cand: Candidate) -> tuple[dict[str, str], list[str]]:
    """The texts of a summary's inputs the engine holds (candidates, stored artifacts), by id, and
    the ids it cannot read (earlier turns)."""
    by_id = asm.by_id()
    texts: dict[str, str] = {}
    unread: list[str] = []
    for i in cand.item.input_item_ids or []:
        c = by_id.get(i)
        got = (c.received or c.item).content if c is not None and c is not cand else None
        if got is None and callable(getattr(asm, "artifact_store", None)):
            stored = asm.artifact_store(i, None)
            got = stored.content if stored is not None else None
        if got is not None:
            texts[i] = got
        else:
            unread.append(i)
    return texts, unread


def negative_findings_check(text: str, inputs: dict[str, str], unread: list[str]) -> tuple[AssertionResult, NegativeFindingsCheck]:
    """`conflicts_and_negative_findings` (seed §6), and the record of how it was judged.

    Failed when the section is missing or empty; when any absence statement of the summary breaks
    the rule on its own text (`findings.judge_statements`: no scope, or "does not exist") — whether
    or not the inputs are visible; or when a negative finding of an input the engine can read is not
    kept with its scope. Passed when statements were judged, or every input was read, and nothing
    failed; not_applicable only when the summary asserts no absence and no input could be read."""
    section = section_body(_SECTIONS[PreserveKey.CONFLICTS_AND_NEGATIVE_FINDINGS], text)
    judged = findings.judge_statements(text)
    lost = findings.findings_not_kept(list(inputs.values()), text)
    record = NegativeFindingsCheck(
        statements=[
            JudgedStatement(statement=j.text, scope=sorted(j.scope) if j.scope is not None else None, judged_as=j.judged_as,  # type: ignore[arg-type]
                            result="failed" if j.problem else "passed", problem=j.problem, section=j.section)
            for j in judged
        ],
        inputs_compared=list(inputs),
        inputs_not_visible=unread,
        lost=lost,
    )
    if not section or lost or any(j.problem for j in judged):
        return AssertionResult.FAILED, record
    if judged or (inputs and not unread):
        return AssertionResult.PASSED, record
    return AssertionResult.NOT_APPLICABLE, record


def _negative_findings_kept(asm: Assembly, cand: Candidate) -> AssertionResult:
    texts, unread = _input_texts(asm, cand)
    return negative_findings_check(cand.content, texts, unread)[0]


def _negative_findings_record(asm: Assembly, cand: Candidate) -> NegativeFindingsCheck | None:
    if PreserveKey.CONFLICTS_AND_NEGATIVE_FINDINGS not in asm.policy.transforms.preserve:
        return None
    texts, unread = _input_texts(asm, cand)
    return negative_findings_check(cand.content, texts, unread)[1]


def _history_inputs(asm: Assembly, cand: Candidate) -> bool:
    if cand.item.input_range is not None:
        return True
    cp = asm.request.checkpoint
    # The checkpoint the engine built from `request.checkpoint` (the runtime's own structured state).
    return (
        cp is not None
        and cand.item_id == cp.summary_id
        and cand.item.source_type == "checkpoint_summary"
        and all(c.item_id != cp.summary_id for c in asm.request.candidates)
    )


def resolve_inputs(asm: Assembly, cand: Candidate) -> tuple[dict[str, tuple[str, list[dict]]], list[str]]:
    """A summary's inputs: id -> (content hash, source refs) for those among the candidates or the
    artifact store; and the ids that resolve to nothing."""
    by_id = asm.by_id()
    found: dict[str, tuple[str, list[dict]]] = {}
    missing: list[str] = []
    for i in cand.item.input_item_ids or []:
        c = by_id.get(i)
        if c is not None and c is not cand:
            got = c.received or c.item
            found[i] = (got.content_hash, [got.source_ref, *(got.source_refs or [])])
            continue
        stored = asm.artifact_store(i, None) if callable(getattr(asm, "artifact_store", None)) else None
        if stored is not None:
            found[i] = (stored.content_hash, [{"artifact_id": stored.artifact_id, "revision": stored.revision}])
            continue
        missing.append(i)
    return found, missing


def inadmissible_inputs(asm: Assembly, cand: Candidate) -> list[str]:
    """Inputs that resolve but are not admissible: a candidate a hard gate excluded (the gates
    exclude its derived items too; this keeps `inputs_resolve` true to its name on its own), or a
    stored artifact outside the request's scope or at another revision than the one required."""
    by_id = asm.by_id()
    bad: list[str] = []
    for i in cand.item.input_item_ids or []:
        c = by_id.get(i)
        if c is not None and c is not cand:
            if c.exclusion is not None and c.exclusion.stage == "hard_gates":
                bad.append(i)
            continue
        stored = asm.artifact_store(i, None) if callable(getattr(asm, "artifact_store", None)) else None
        if stored is not None:
            required = asm.request.required_revision_map().get(stored.artifact_id)
            if cross_scope_problem(asm, stored.scope) or (required is not None and str(required[0]) != str(stored.revision)):
                bad.append(i)
    return bad


def trust_before(asm: Assembly, cand: Candidate) -> str:
    """The highest trust among a derived item's inputs actually admitted (inputs outside the request:
    the ceiling of the source type their lineage node declares); `not_declared` when none is known."""
    known = [t for t in admitted_input_trusts(asm, cand) if t is not None]
    return max(known, key=lambda t: TRUST_RANK[t]).value if known else "not_declared"


def input_digest(asm: Assembly, cand: Candidate) -> str:
    """sha256 over the inputs' contents (their content hashes), not their ids alone; an input the
    engine cannot see contributes null, so the digest says which inputs it could not hash."""
    found, _ = resolve_inputs(asm, cand)
    return sha256_json([[i, found[i][0] if i in found else None] for i in cand.item.input_item_ids or []])


_RANGE_KEY = "lines"


def ref_within(ref: dict, parent: dict) -> bool:
    """Does `ref` point inside `parent`? Same identity fields; its line range inside the parent's."""
    for key, value in parent.items():
        if key == _RANGE_KEY:
            continue
        if key in ref and str(ref[key]) != str(value):
            return False
    shared = [k for k in ("repo", "commit", "path", "url", "artifact_id", "object_id", "summary_id") if k in ref]
    if not shared or any(k not in parent for k in shared):
        return False
    if _RANGE_KEY in ref and _RANGE_KEY in parent:
        from .source_limits import expand_numbers

        inner, outer = expand_numbers(str(ref[_RANGE_KEY])), expand_numbers(str(parent[_RANGE_KEY]))
        return bool(inner and outer) and set(inner) <= set(outer)
    return True


def _trust_not_raised(asm: Assembly, cand: Candidate) -> bool:
    if cand.trust is None:
        return False
    inputs = [t for t in admitted_input_trusts(asm, cand) if t is not None]
    ceiling = max((TRUST_RANK[t] for t in inputs), default=TRUST_RANK[Trust.DERIVED_CONTEXT])
    return TRUST_RANK[cand.trust] <= max(ceiling, TRUST_RANK[Trust.DERIVED_CONTEXT])


def verify_summaries(asm: Assembly) -> None:
    for cand in list(asm.candidates):
        if cand.built_by_engine:
            continue  # the budget's structured summary was checked when it was built
        if not is_summary(cand.item) or cand.exclusion is not None and cand.exclusion.stage == "hard_gates":
            continue
        if not cand.alive:
            continue
        if TransformType.SUMMARIZE not in asm.policy.transforms.allowed:
            # The policy admits no summaries at all: none is verified, none enters.
            assertions = {"summarize_allowed": AssertionResult.FAILED}
        else:
            assertions = check_summary(asm, cand)
        failed = [k for k, v in assertions.items() if v == AssertionResult.FAILED]
        record_id = f"transform-{cand.item_id}-summarize"
        transformer = CHECKPOINT_TRANSFORMER if cand.item.source_type == "checkpoint_summary" else f"supplied:{cand.item.producer or 'unknown'}"
        input_ids = list(cand.item.input_item_ids or [])
        digest_of_inputs = input_digest(asm, cand)
        asm.transforms.append(
            TransformRecord(
                record_id=record_id,
                type=TransformType.SUMMARIZE,
                input_item_ids=input_ids,
                input_range=cand.item.input_range,
                input_digest=digest_of_inputs,
                objective="restore_current_research_state",
                policy_version=asm.policy.label,
                transformer_version=transformer,
                output_item_id=cand.item_id,
                output_digest=None if failed else cand.item.content_hash,
                preservation_assertions=assertions,
                token_estimate_before=cand.tokens,
                token_estimate_after=None if failed else cand.tokens,
                trust_before=trust_before(asm, cand),
                trust_after=cand.trust.value if cand.trust else "unlabelled",
                status="blocked" if failed else "verified",
                before_excerpt="",
                after_excerpt=_excerpt(cand.content),
                trigger="supplied",
                negative_findings=_negative_findings_record(asm, cand) if "summarize_allowed" not in assertions else None,
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
                input_digest=digest_of_inputs,
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
            f"Hard Constraints: {_lines(state.constraints)}",
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


# --------------------------------------------------------------------------- the budget's structured summary

STRUCTURED_TRANSFORMER = "ctxeng-structured/1"


def _first_line(text: str, limit: int = 200) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _unique(values) -> list:
    out: list = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


def latest_draft(items: list[Candidate]):
    """The newest article_draft revision among `items` (numbers compare as numbers), or None."""
    revisions = [c.item.revision for c in items if c.item.kind == "article_draft" and c.item.revision is not None]
    return max(revisions, key=lambda r: (isinstance(r, str), r if isinstance(r, int) else str(r)), default=None)


def _evicted_facts(asm: Assembly, evicted: list[Candidate]) -> dict:
    """What the summary must carry, read from the evicted items, the checkpoint and the runtime."""
    cp = asm.request.checkpoint
    state = asm.request.runtime_state
    open_ids = _unique(
        [*(cp.open_item_ids if cp else []), *(i for c in evicted for i in (c.item.open_item_ids or []))]
    )
    draft = cp.draft_revision if cp is not None and cp.draft_revision is not None else None
    if draft is None:
        draft = latest_draft(evicted)
    if draft is None and state is not None:
        draft = state.article_draft_revision
    artifacts = _unique(
        [
            *(cp.artifact_refs if cp else []),
            *(
                f"{c.item.source_ref['artifact_id']}@{c.item.source_ref.get('revision', c.item.revision)}"
                for c in evicted
                if c.item.source_ref.get("artifact_id")
            ),
        ]
    )
    unresolved = _unique([*(cp.unresolved_tool_calls if cp else []), *(p.call.call_id for p in asm.pairs if p.unresolved_handling is not None)])
    negative = _unique(f.text for c in evicted for f in findings.negative_findings(c.content))
    return {"open_items": open_ids, "draft": draft, "artifacts": artifacts, "unresolved": unresolved, "negative_findings": negative}


def _conflicts_line(cp: CheckpointState | None, negative: list[str]) -> str:
    """The checkpoint's conflicts and negative findings, then the evicted items' negative findings
    as they wrote them (scope included), each once."""
    entries = _unique([*(cp.conflicts_and_negative_findings if cp else []), *negative])
    return _lines(entries) if entries or cp else "none recorded"


def structured_summary(asm: Assembly, evicted: list[Candidate], *, partition: str) -> tuple[Candidate, TransformRecord]:
    """The deterministic structured checkpoint summary (seed §6) of state items the budget evicted.

    Built from `request.checkpoint` (when the runtime sent one) and the evicted items; it names every
    evicted item with its ref and content hash, so the agent can fetch any of them back. Its
    assertions are checked on the text it produced, against facts read from the evicted items."""
    cp = asm.request.checkpoint
    facts = _evicted_facts(asm, evicted)
    taken = {c.item_id for c in asm.candidates}
    item_id = f"structured-summary-{partition}"
    n = 2
    while item_id in taken:
        item_id = f"structured-summary-{partition}-{n}"
        n += 1
    goal_items = [c for c in asm.alive() if c.item.kind == "goal"]
    stage_items = [c for c in evicted if c.item.kind == "current_stage"]
    goal = cp.goal if cp else (_first_line(goal_items[0].content) if goal_items else "(in the task items)")
    stage = cp.current_stage if cp else (_first_line(stage_items[0].content) if stage_items else asm.request.stage)
    claims = [f"{c.claim} [{_ref_label(c.source_ref)}]" for c in cp.confirmed_claims] if cp else []
    replaced = [
        f"{c.item_id} ({c.item.kind}; {_ref_label(c.item.source_ref)}; {c.item.content_hash})" for c in evicted
    ]
    content = "\n".join(
        [
            f"Goal: {goal}",
            f"Hard Constraints: {_lines(cp.constraints) if cp else '(in the task items)'}",
            f"Current Stage: {stage}",
            "Done / In Progress / Blocked: "
            + (f"done: {_lines(cp.done)} | in progress: {_lines(cp.in_progress)} | blocked: {_lines(cp.blocked)}" if cp else "none recorded"),
            f"Confirmed Claims: {_lines(claims)}",
            f"Conflicts and Negative Findings: {_conflicts_line(cp, facts['negative_findings'])}",
            f"Open Items: {', '.join(facts['open_items']) if facts['open_items'] else 'none'}",
            f"Draft Revision: {facts['draft'] if facts['draft'] is not None else 'none'}",
            f"Unresolved Tool Calls: {', '.join(facts['unresolved']) if facts['unresolved'] else 'none'}",
            f"Next Steps: {_lines(cp.next_steps) if cp else 'none recorded'}",
            f"Artifact / Checkpoint Refs: {', '.join(facts['artifacts']) if facts['artifacts'] else 'none'}",
            f"Replaced Items (over the {partition} budget; fetch by ref): {'; '.join(replaced)}",
        ]
    )
    ids = [c.item_id for c in evicted]
    record_id = f"transform-{item_id}-summarize"
    digest = sha256_text(content)
    in_digest = sha256_json([[c.item_id, c.item.content_hash] for c in evicted])
    item = ContextItem(
        item_id=item_id,
        kind="summary",
        source_type="checkpoint_summary",
        source_ref={"summary_id": item_id, "partition": partition},
        source_lineage=[
            LineageNode(node_id=item_id, type="summary", digest=digest, input_node_ids=ids, input_digest=in_digest, transform_record_id=record_id)
        ],
        producer=STRUCTURED_TRANSFORMER,
        content=content,
        content_hash=digest,
        scope=asm.request.scope,
        trust=Trust.DERIVED_CONTEXT,
        intended_role=Role.DERIVED_CONTEXT,
        input_item_ids=ids,
        source_refs=[c.item.source_ref for c in evicted],
        preserves={"open_item_ids": facts["open_items"], "unresolved_tool_calls": facts["unresolved"]},
    )
    cand = Candidate(
        item=item,
        order=len(asm.candidates),
        content=content,
        trust=Trust.DERIVED_CONTEXT,
        digest=digest,
        zone=ROLE_ZONE[Role.DERIVED_CONTEXT],
        load_mode=LoadMode.RESIDENT,
        partition=partition,
        admission_reason=f"structured summary of {len(ids)} state items evicted from partition {partition!r} (eviction structured_summary)",
        built_by_engine=True,
    )
    cand.tokens = cand.original_tokens = block_tokens(asm, cand)
    assertions = check_structured_summary(asm, content, evicted, ids)
    failed = [k for k, v in assertions.items() if v == AssertionResult.FAILED]
    top = max((c.trust for c in evicted if c.trust is not None), key=lambda t: TRUST_RANK[t], default=None)
    record = TransformRecord(
        record_id=record_id,
        type=TransformType.SUMMARIZE,
        input_item_ids=ids,
        input_digest=in_digest,
        objective=f"replace_state_items_over_the_{partition}_budget",
        policy_version=asm.policy.label,
        transformer_version=STRUCTURED_TRANSFORMER,
        output_item_id=item_id,
        output_digest=None if failed else digest,
        preservation_assertions=assertions,
        token_estimate_before=sum(c.tokens for c in evicted),
        token_estimate_after=None if failed else cand.tokens,
        trust_before=top.value if top is not None else "unlabelled",
        trust_after=Trust.DERIVED_CONTEXT.value,
        status="blocked" if failed else "applied",
        before_excerpt=_excerpt("\n".join(f"{c.item_id}: {_first_line(c.content)}" for c in evicted)),
        after_excerpt=_excerpt(content),
        trigger="over_partition",
        negative_findings=negative_findings_check(content, {c.item_id: c.content for c in evicted}, [])[1],
    )
    cand.transform_record_id = record_id
    if failed:
        cand.exclude(
            Exclusion(ExclusionReason.TRANSFORM_BLOCKED, "preservation assertions failed: " + ", ".join(failed), "budget", failed_assertions=failed)
        )
    return cand, record


def check_structured_summary(asm: Assembly, text: str, evicted: list[Candidate], ids: list[str]) -> dict[str, AssertionResult]:
    """Every assertion compares the summary text with a fact read from the evicted items themselves."""
    P, F, NA = AssertionResult.PASSED, AssertionResult.FAILED, AssertionResult.NOT_APPLICABLE
    facts = _evicted_facts(asm, evicted)
    open_line = next((ln for ln in text.splitlines() if ln.startswith("Open Items:")), "")
    draft_line = next((ln for ln in text.splitlines() if ln.startswith("Draft Revision:")), "")
    want_open = _unique([i for c in evicted for i in (c.item.open_item_ids or [])])
    newest = latest_draft(evicted)
    artifacts = [str(c.item.source_ref["artifact_id"]) for c in evicted if c.item.source_ref.get("artifact_id")]
    results = {
        "input_items": P if ids and all(c.item_id in text for c in evicted) else F,
        "input_digests_present": P if all(c.item.content_hash in text for c in evicted) else F,
        "goal": P if re.search(_SECTIONS[PreserveKey.GOAL], text, re.I | re.M) else F,
        "current_stage": P if re.search(_SECTIONS[PreserveKey.CURRENT_STAGE], text, re.I | re.M) else F,
        "open_items": NA if not want_open else (P if all(re.search(rf"\b{re.escape(i)}\b", open_line) for i in want_open) else F),
        "article_draft_revision": NA if newest is None else (P if draft_line.strip() == f"Draft Revision: {newest}" else F),
        "artifact_refs": NA if not artifacts else (P if all(a in text for a in artifacts) else F),
        "unresolved_tool_calls": NA if not facts["unresolved"] else (P if all(c in text for c in facts["unresolved"]) else F),
        "trust_not_raised": P
        if all(c.trust is not None and TRUST_RANK[Trust.DERIVED_CONTEXT] <= TRUST_RANK[c.trust] for c in evicted)
        else F,
        "conflicts_and_negative_findings": _structured_findings(text, evicted, facts["negative_findings"]),
    }
    return results


def _structured_findings(text: str, evicted: list[Candidate], negative: list[str]) -> AssertionResult:
    """The evicted items' findings kept with their scope, and every absence statement the summary
    carries (the runtime checkpoint's among them) judged on its own text."""
    own, _ = negative_findings_check(text, {c.item_id: c.content for c in evicted}, [])
    if own == AssertionResult.FAILED or findings.lost_findings([c.content for c in evicted], text):
        return AssertionResult.FAILED
    judged = findings.judge_statements(text)
    return AssertionResult.PASSED if negative or judged else AssertionResult.NOT_APPLICABLE


def record_structured_summary(asm: Assembly, cand: Candidate, record: TransformRecord) -> None:
    asm.candidates.append(cand)
    asm.transforms.append(record)
    asm.summaries.append(
        SummaryRecord(
            summary_id=cand.item_id,
            item_id=cand.item_id,
            input_item_ids=list(record.input_item_ids),
            input_digest=record.input_digest,
            transform_record_id=record.record_id,
            preservation_assertions=record.preservation_assertions,
            decision="included" if cand.alive else "excluded",
        )
    )


# --------------------------------------------------------------------------- budget-driven transforms of one item
#
# Both run only when a partition is over budget (trigger `over_partition`) and the policy allows
# them; the budget admits the result only if it fits. Each reducer is paired with a check written
# apart from it, so the assertions it records are facts about input and output.

TRUNCATE_TRANSFORMER = "ctxeng-truncate-turns/1"
COMPRESS_TRANSFORMER = "ctxeng-decision-compress/1"

# A turn starts at a speaker or step marker; an item without markers is one turn per line.
TURN_START = re.compile(r"^\s*((user|assistant|tool|system|human|ai|agent)\s*:|(turn|step)\s+\d+\b|trace step \d+\b)", re.I)


def split_turns(text: str) -> list[str]:
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if TURN_START.match(line)]
    if not starts:
        return [line for line in lines]
    if starts[0] != 0:
        starts.insert(0, 0)
    return ["\n".join(lines[a:b]) for a, b in zip(starts, [*starts[1:], len(lines)], strict=True)]


def may_truncate(cand: Candidate, room: int) -> bool:
    """False when not even an empty block fits `room`: no turn can (the item need not be read)."""
    return room > cand.header_tokens + 8


def truncate_turns(asm: Assembly, cand: Candidate, room: int) -> tuple[str, dict] | None:
    """The newest whole turns that fit `room` tokens (fence header included), or None if none fits."""
    if not may_truncate(cand, room):
        return None
    turns = split_turns(cand.content)
    head = f"[truncated at turn boundaries: the newest turns of {len(turns)}; full content {cand.item.content_hash}]"
    budget = room - cand.header_tokens - asm.tokenizer.count(head) - 8
    used = 0
    first = len(turns)
    for i in range(len(turns) - 1, -1, -1):
        n = asm.tokenizer.count(turns[i]) + 1
        if used + n > budget:
            break
        used += n
        first = i
    if first == len(turns):
        return None
    ref = {**cand.item.source_ref, "turns": f"{first + 1}-{len(turns)}"}
    return f"{head}\n" + "\n".join(turns[first:]), ref


def check_truncation(cand: Candidate, out: str, ref: dict) -> dict[str, AssertionResult]:
    """Facts: the body is a suffix of the input that starts on a turn start, and the last turn is in it."""
    P, F = AssertionResult.PASSED, AssertionResult.FAILED
    body = out.split("\n", 1)[1] if "\n" in out else ""
    text = cand.content
    at = len(text) - len(body)
    on_boundary = text.endswith(body) and (at == 0 or text[at - 1] == "\n")
    has_markers = any(TURN_START.match(line) for line in text.split("\n"))
    starts_a_turn = on_boundary and (at == 0 or not has_markers or bool(TURN_START.match(body)))
    spec = str(ref.get("turns", ""))
    total = len(split_turns(text))
    claimed_ok = spec == f"{total - len(split_turns(body)) + 1}-{total}" if body else False
    return {
        "non_empty": P if body.strip() else F,
        "whole_turns_only": P if starts_a_turn and claimed_ok else F,
        "newest_turn_kept": P if text.rstrip("\n").split("\n")[-1] in body.split("\n") else F,
        "hash_present": P if cand.item.content_hash in out else F,
    }


_DECISION_WORDS = ("decision", "decided", "we decided", "resolved")
_REASON_WORDS = ("reason", "because", "rationale")
_SOURCE_WORDS = ("source", "sources", "ref", "refs", "evidence")
# The words before a line's first colon. The words end at a letter (greedy) rather than at the
# shortest run (lazy `[A-Za-z ]*?\s*:`, which rescanned the trailing blanks from every position of
# a long line: quadratic); `_line_kind` strips and lowercases them, so the kind is the same.
_LINE_KIND = re.compile(r"^\s*(?:[-*]\s*)?([A-Za-z](?:[A-Za-z ]*[A-Za-z])?)\s*:")


def _line_kind(line: str) -> str | None:
    m = _LINE_KIND.match(line)
    word = m.group(1).strip().lower() if m else ""
    if word in _DECISION_WORDS:
        return "decision"
    if word in _REASON_WORDS:
        return "reason"
    if word in _SOURCE_WORDS:
        return "source"
    return None


def decision_compress(cand: Candidate) -> tuple[str, dict] | None:
    """Keep the decision log of a state item: `Decision:`, `Reason:`/`Because:` and `Source:` lines.

    Deterministic, no model call. None when the item records no decision."""
    lines = cand.content.split("\n")
    kept = [i for i, line in enumerate(lines) if _line_kind(line) is not None]
    if not any(_line_kind(lines[i]) == "decision" for i in kept):
        return None
    from .source_limits import compress_numbers  # source_limits imports this module

    head = f"[decision-compressed: {len(kept)} of {len(lines)} lines (decisions, reasons, sources); full content {cand.item.content_hash}]"
    ref = {**cand.item.source_ref, "lines": compress_numbers([i + 1 for i in kept])}
    return head + "\n" + "\n".join(lines[i] for i in kept), ref


# A source ref: a URL, a sha256 digest, or `name@commit` (what `\b[\w.-]+@[0-9a-f]{7,40}\S*`
# finds). That last form is tried only where a run of `[\w.-]` begins, its leading dots and dashes
# skipped (the \b form starts at the run's first word character, so the token is the same): from
# every word boundary of a long run it rescanned the rest of the run each time (quadratic).
_REF_TOKEN = re.compile(r"https?://\S+|sha256:[0-9a-f]{64}|(?<![\w.-])[.-]*(?P<at>\w[\w.-]*@[0-9a-f]{7,40}\S*)")


def ref_tokens(line: str) -> list[str]:
    """The source refs in `line`, in order."""
    return [m.group("at") or m.group(0) for m in _REF_TOKEN.finditer(line)]


def check_decision_compression(cand: Candidate, out: str) -> dict[str, AssertionResult]:
    """Facts: every decision and reason line of the input, and every source ref they or the item's
    source lines carry, is in the output (read with `str.split`, not the reducer's pattern)."""
    P, F = AssertionResult.PASSED, AssertionResult.FAILED
    kept = set(out.split("\n")[1:])
    wanted: list[str] = []
    refs: list[str] = []
    for line in cand.content.split("\n"):
        first = line.strip().lstrip("-* ").split(":", 1)[0].strip().lower()
        if first in _DECISION_WORDS or first in _REASON_WORDS:
            wanted.append(line)
            refs.extend(ref_tokens(line))
        elif first in _SOURCE_WORDS:
            refs.extend(ref_tokens(line))
    body = "\n".join(out.split("\n")[1:])
    return {
        "decisions_and_reasons_kept": P if wanted and all(line in kept for line in wanted) else F,
        "source_refs_kept": P if all(ref in body for ref in refs) else F,
        "hash_present": P if cand.item.content_hash in out else F,
    }
