"""Stage 6a — per-source limits, before the budget is split (seed §5).

Contract: a source type with a limit in the policy's `source_limits` is reduced at the source, and
each reduction writes a TransformRecord whose preservation assertions are checked:

- `failures_plus_artifact_ref` (test logs): keep every failure line, verbatim and in order, plus
  the artifact ref and digest of the full log; assertions `failure_lines_kept`, `artifact_ref_present`.
- `relevant_sections_plus_hash` (web documents) and `excerpt_with_line_range` (repository code):
  only when the item is over the limit's `max_tokens`, keep whole leading paragraphs / lines up to
  it, plus the full content's hash (and the line range for code); assertions `hash_present`,
  `line_range_present`.

Policy keys are source-type aliases: `repository` covers repository sources, `web_document`
official documents and web pages. A reduction never raises trust. An assertion that fails blocks
the item (`transform_blocked`).
"""

from __future__ import annotations

import re

from .hashing import sha256_text
from .models import TransformRecord
from .vocabulary import AssertionResult, ExclusionReason, SourceLimitMode, TransformType
from .working import Assembly, Candidate, Exclusion

ALIASES: dict[str, tuple[str, ...]] = {
    "repository": ("repository_source", "repository"),
    "test_log": ("test_log",),
    "web_document": ("official_document", "web_document", "web_page"),
}

FAILURE_LINE = re.compile(r"\b(FAILED|FAIL|ERROR)\b|Traceback \(most recent call last\)|^E\s{2,}")


def _limit_for(asm: Assembly, source_type: str):
    for key, limit in asm.policy.source_limits.items():
        if source_type == key or source_type in ALIASES.get(key, ()):
            return key, limit
    return None, None


def _artifact_label(cand: Candidate) -> str:
    ref = cand.item.source_ref
    ident = ref.get("artifact_id") or ref.get("url") or ref.get("path") or cand.item_id
    where = f" (repo {ref['repo']} @ {ref['commit']})" if ref.get("repo") and ref.get("commit") else ""
    return f"{ident}{where}"


def _failures_plus_artifact_ref(cand: Candidate) -> tuple[str, dict[str, AssertionResult], str]:
    lines = cand.content.splitlines()
    failures = [line for line in lines if FAILURE_LINE.search(line)]
    ref = _artifact_label(cand)
    out = "\n".join(
        [
            f"[test log reduced at source: {len(failures)} failure lines of {len(lines)}; full log by artifact ref]",
            f"artifact_ref: {ref}",
            f"full_log_digest: {cand.item.content_hash}",
            *failures,
        ]
    )
    kept = out.splitlines()[3:]
    assertions = {
        "failure_lines_kept": AssertionResult.PASSED if kept == failures else AssertionResult.FAILED,
        "artifact_ref_present": AssertionResult.PASSED if str(cand.item.source_ref.get("artifact_id", ref)) in out else AssertionResult.FAILED,
    }
    return out, assertions, "keep_failures_and_artifact_ref"


def _leading_within(asm: Assembly, text: str, budget: int, sep: str) -> str:
    parts = text.split(sep)
    kept: list[str] = []
    used = 0
    for part in parts:
        n = asm.tokenizer.count(part + sep)
        if used + n > budget:
            break
        kept.append(part)
        used += n
    return sep.join(kept)


def _sections_plus_hash(asm: Assembly, cand: Candidate, max_tokens: int, code: bool):
    sep = "\n" if code else "\n\n"
    head = _leading_within(asm, cand.content, max_tokens, sep)
    ref = cand.item.source_ref
    note = f"[reduced at source to {len(head)} of {len(cand.content)} characters; full content {cand.item.content_hash}"
    if code and ref.get("lines"):
        note += f"; lines {ref['lines']}"
    out = note + "]\n" + head
    assertions = {"hash_present": AssertionResult.PASSED if cand.item.content_hash in out else AssertionResult.FAILED}
    if code:
        assertions["line_range_present"] = AssertionResult.PASSED if ref.get("lines") and str(ref["lines"]) in out else AssertionResult.FAILED
    return out, assertions, "keep_leading_sections_and_hash"


def apply_source_limits(asm: Assembly) -> None:
    for cand in asm.alive():
        key, limit = _limit_for(asm, cand.item.source_type)
        if limit is None:
            continue
        if limit.default == SourceLimitMode.FAILURES_PLUS_ARTIFACT_REF:
            out, assertions, objective = _failures_plus_artifact_ref(cand)
        elif limit.default in (SourceLimitMode.RELEVANT_SECTIONS_PLUS_HASH, SourceLimitMode.EXCERPT_WITH_LINE_RANGE):
            if limit.max_tokens is None or cand.tokens <= limit.max_tokens:
                continue
            out, assertions, objective = _sections_plus_hash(
                asm, cand, limit.max_tokens, code=limit.default == SourceLimitMode.EXCERPT_WITH_LINE_RANGE
            )
        else:
            continue
        record_transform(asm, cand, out, assertions, TransformType.EXCERPT, objective, f"source-limit/{limit.default.value}/v1")


def record_transform(asm, cand, out, assertions, ttype, objective, transformer) -> None:
    """Replace a candidate's content with a checked reduction and write its TransformRecord."""
    before_tokens = cand.tokens
    failed = [name for name, result in assertions.items() if result == AssertionResult.FAILED]
    record_id = f"transform-{cand.item_id}-{ttype.value}"
    after_tokens = None if failed else asm.tokenizer.count(out) + cand.header_tokens
    trust = cand.trust.value if cand.trust else "unlabelled"
    asm.transforms.append(
        TransformRecord(
            record_id=record_id,
            type=ttype,
            input_item_ids=[cand.item_id],
            input_digest=cand.item.content_hash,
            objective=objective,
            policy_version=asm.policy.label,
            transformer_version=transformer,
            output_item_id=cand.item_id,
            output_digest=None if failed else sha256_text(out),
            preservation_assertions=assertions,
            token_estimate_before=before_tokens,
            token_estimate_after=after_tokens,
            trust_before=trust,
            trust_after=trust,
            status="blocked" if failed else "applied",
            before_excerpt=_excerpt(cand.content),
            after_excerpt="" if failed else _excerpt(out),
        )
    )
    cand.transform_record_id = record_id
    if failed:
        cand.exclude(Exclusion(ExclusionReason.TRANSFORM_BLOCKED, "preservation assertions failed: " + ", ".join(failed), "source_limits", failed_assertions=failed))
        return
    cand.content = out
    cand.tokens = after_tokens or 0


def _excerpt(text: str, limit: int = 1200) -> str:
    return text if len(text) <= limit else text[: limit // 2] + "\n…\n" + text[-limit // 2 :]
