"""Stage 6a — per-source limits, before the budget is split (seed §5).

Contract: an item whose source type has a limit in the policy's `source_limits` and is over it is
reduced at the source into a *derived item*, and every reduction writes a TransformRecord
(`type: excerpt`, `trigger: over_source_limit`) whose preservation assertions are computed from
facts the reducer does not supply:

- `failures_plus_artifact_ref` (test logs, always): keep every failure line, verbatim and in
  order, plus the artifact ref and the digest of the full log. `failure_lines_kept` counts the
  failures by the log's own format (`logformats`: pytest, jest, TAP, go test, JUnit XML) and looks
  for each in the output; a log in no known format fails `log_format_recognised`;
  `artifact_ref_present` needs an artifact id in the item's ref and in the output;
  `line_range_matches` re-reads each line number the narrowed ref names.
- `excerpt_with_line_range` (repository code) over `max_tokens` (default 1000): keep the
  contiguous run of lines that best matches the current decision's terms; `non_empty`,
  `hash_present`, `line_range_matches` (the kept text is exactly the claimed lines of the input).
- `relevant_sections_plus_hash` (web documents) over `max_tokens`: keep the sections (paragraphs)
  that match the current decision's terms — the item's `claim`, else the task items — best first,
  in document order; `non_empty`, `hash_present`, `sections_match_source`, `sections_relevant`.
- `whole`: never reduced.

A derived item keeps its `item_id` (tool pairs and agents refer to it), gets the output's content
hash, a `source_ref` narrowed to what was kept (`lines: "149-160"`, `lines: "418,1291"` for a
log, `sections: "2,5"` for a document) and a lineage node `type: excerpt` with input and output
digests; the item as received stays on the candidate. A reduction never raises trust.

Transforms follow the policy: when `excerpt` is not in `transforms.allowed` or the trigger leaves
out source limits, an over-limit item is not reduced but excluded (`budget_evicted`; the
assembly is blocked `required_partition_missing`, cause `budget_exhausted`, if the item is required). A failed assertion excludes
the item as `transform_blocked` (the assembly is blocked if it is required).
Policy keys are source-type aliases: `repository` covers repository sources, `web_document`
official documents and web pages.

The windows code and web items were reduced to are remembered per tokenizer, keyed by all they
depend on (content digest, decision terms, limit, the item's counts): an agent's next step sends
most of its over-limit items again, and their reducers skip the estimate. A remembered window is
used only when its exact count confirms it is within budget, and the assertions above are
computed again, from the input and the output, on every assembly.
"""

from __future__ import annotations

import re
import weakref
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

from .hashing import sha256_text
from .logformats import Failures, all_kept_in_order, read_failures
from .models import LineageNode, TransformRecord
from .render import block_count_parts, block_tokens, count_ahead, settle_ahead
from .vocabulary import (
    AssertionResult,
    BlockedCause,
    BlockedReason,
    ExclusionReason,
    Role,
    SourceLimitMode,
    TransformTrigger,
    TransformType,
)
from .working import Assembly, Candidate, Exclusion

ALIASES: dict[str, tuple[str, ...]] = {
    "repository": ("repository_source", "repository"),
    "test_log": ("test_log",),
    "web_document": ("official_document", "web_document", "web_page"),
}

DEFAULT_EXCERPT_TOKENS = 1000

# The source_ref keys a reduction narrows (to what it kept); nothing else of the ref changes.
NARROWED_KEYS = ("lines", "sections")

# Text each reducer writes whatever it keeps (its marker's fixed words and the full content's
# digest): `reduced_fixed_text` builds a lower bound of every reduction from these same strings.
CODE_MARKER = "[excerpt at source: lines "
SECTIONS_MARKER = "[relevant sections at source: "
LOG_MARKER = "[test log reduced at source: "
FULL_CONTENT = "; full content {digest}]"
LOG_DIGEST = "full_log_digest: {digest}"

# The reducer's own selection of failure lines. `logformats` checks its work independently.
FAILURE_LINE = re.compile(
    r"\b(FAILED|FAIL|ERROR)\b|Traceback \(most recent call last\)|^E[ \t]{2,}|^[ \t]*not ok\b|^[ \t]*--- FAIL:"
    r"|^[ \t]*[✕×✗●] |^panic:|<failure\b|<error\b",
    re.M,
)
# Literal text every FAILURE_LINE match contains: found with str.find (fast), then each line
# holding one is tested with the pattern, instead of running the pattern over a whole 3,000-line log.
_FAILURE_TOKENS = ("FAIL", "ERROR", "Traceback (most recent call last)", "E  ", "E\t", "E \t", "not ok", "panic:", "<failure", "<error", "✕", "×", "✗", "●")
_XML_FAILURE = re.compile(r"<(failure|error)\b")

P, F, NA = AssertionResult.PASSED, AssertionResult.FAILED, AssertionResult.NOT_APPLICABLE

_STOPWORDS = frozenset(
    "the and for with that this from into what which when where how does each their there they them "
    "then than have has had are was were will would should could must only also about over under "
    "write find check confirm verify keep every across before after while being".split()
)


def _limit_for(asm: Assembly, source_type: str):
    for key, limit in asm.policy.source_limits.items():
        if source_type == key or source_type in ALIASES.get(key, ()):
            return key, limit
    return None, None


# --------------------------------------------------------------------------- helpers


def decision_terms(asm: Assembly, cand: Candidate) -> set[str]:
    """Words of the current decision: the item's own claim, else the task (goal, constraints) items
    (the same for every item of the assembly, so read once)."""
    if cand.item.claim:
        return _terms([cand.item.claim])
    if asm.task_terms is None:
        asm.task_terms = _terms([c.content for c in asm.alive() if c.role == Role.TASK_INTENT])
    return asm.task_terms


def _terms(texts: list[str]) -> set[str]:
    return {w for t in texts for w in re.findall(r"[a-z0-9][a-z0-9_-]{3,}", t.lower())} - _STOPWORDS


def hits_per_part(parts: list[str], terms: set[str]) -> list[int]:
    """For each part (a line, a section), how many distinct decision terms occur in it.

    One scan of the joined text per term, instead of every term against every part: on a 2,000-item
    request this is the difference between ~0.2 s and a few ms. A term never spans two parts (terms
    hold no line break), so each occurrence belongs to the part its offset falls in."""
    if not terms or not parts:
        return [0] * len(parts)
    low = [p.lower() for p in parts]  # lowered per part: lower() may change a part's length
    starts, at = [], 0
    for part in low:
        starts.append(at)
        at += len(part) + 1
    text = "\n".join(low)
    found: list[set[str]] = [set() for _ in parts]
    for term in terms:
        i = text.find(term)
        while i >= 0:
            found[bisect_right(starts, i) - 1].add(term)
            i = text.find(term, i + 1)
    return [len(f) for f in found]


def compress_numbers(numbers: list[int]) -> str:
    """[3, 4, 5, 9] -> "3-5,9"."""
    out: list[str] = []
    i = 0
    while i < len(numbers):
        j = i
        while j + 1 < len(numbers) and numbers[j + 1] == numbers[j] + 1:
            j += 1
        out.append(str(numbers[i]) if i == j else f"{numbers[i]}-{numbers[j]}")
        i = j + 1
    return ",".join(out)


def expand_numbers(spec: str) -> list[int] | None:
    """"3-5,9" -> [3, 4, 5, 9]; None when it is not such a list."""
    out: list[int] = []
    for part in str(spec).split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if not m:
            return None
        a = int(m.group(1))
        b = int(m.group(2) or a)
        if b < a:
            return None
        out.extend(range(a, b + 1))
    return out


def _artifact_id(cand: Candidate) -> str | None:
    ref = cand.item.source_ref
    if ref.get("artifact_id"):
        return str(ref["artifact_id"])
    if cand.item.artifact_ref is not None:
        return cand.item.artifact_ref.artifact_id
    return None


def _ref_label(cand: Candidate) -> str:
    ref = cand.item.source_ref
    ident = ref.get("artifact_id") or ref.get("url") or ref.get("path") or cand.item_id
    where = f" (repo {ref['repo']} @ {ref['commit']})" if ref.get("repo") and ref.get("commit") else ""
    return f"{ident}{where}"


# --------------------------------------------------------------------------- reductions


def failures_plus_artifact_ref(cand: Candidate):
    out, ref = reduce_log(cand)
    failures = read_failures(cand.content)
    objective = f"keep_failures_and_artifact_ref ({failures.format or 'unrecognised'} format, {failures.count} failures)"
    return out, ref, check_log(cand, out, ref, failures), objective


def reduce_log(cand: Candidate) -> tuple[str, dict]:
    """The reducer: failure lines (by `FAILURE_LINE`), the artifact ref and the full log's digest."""
    content = cand.content
    lines = content.split("\n")
    hits: list[int] = []
    for token in _FAILURE_TOKENS:
        at = content.find(token)
        while at >= 0:
            hits.append(at)
            at = content.find(token, content.find("\n", at) + 1 or len(content))
    keep: set[int] = set()
    line_no = last = 0
    for at in sorted(hits):
        line_no += content.count("\n", last, at)
        last = at
        if FAILURE_LINE.search(lines[line_no]):
            keep.add(line_no)
    for i in list(keep):
        # JUnit XML: a failure element says which test failed only through its enclosing testcase.
        if i > 0 and _XML_FAILURE.search(lines[i]) and "<testcase" in lines[i - 1]:
            keep.add(i - 1)
    kept = sorted(keep)
    artifact = _artifact_id(cand)
    out = "\n".join(
        [
            f"{LOG_MARKER}{len(kept)} of {len(lines)} lines kept (failure lines); full log by artifact ref]",
            f"artifact_ref: {artifact or _ref_label(cand)}",
            LOG_DIGEST.format(digest=cand.item.content_hash),
            *(lines[i] for i in kept),
        ]
    )
    ref = dict(cand.item.source_ref)
    ref["lines"] = compress_numbers([i + 1 for i in kept]) if kept else "none"
    return out, ref


def check_log(cand: Candidate, out: str, ref: dict, failures: Failures | None = None) -> dict[str, AssertionResult]:
    """Facts read from the input log (by its own format), the output and the narrowed ref."""
    failures = failures if failures is not None else read_failures(cand.content)
    artifact = _artifact_id(cand)
    return {
        "log_format_recognised": P if failures.format is not None else F,
        "failure_lines_kept": NA if failures.format is None else (P if all_kept_in_order(failures.needles, out) else F),
        "artifact_ref_present": P if artifact and f"artifact_ref: {artifact}" in out else F,
        "line_range_matches": _line_numbers_match(cand.content.split("\n"), str(ref.get("lines")), out),
    }


def _line_numbers_match(lines: list[str], spec: str, out: str) -> AssertionResult:
    if spec == "none":
        return P if len(out.splitlines()) == 3 else F
    numbers = expand_numbers(spec)
    if numbers is None or any(n < 1 or n > len(lines) for n in numbers):
        return F
    body = out.splitlines()[3:]
    return P if body == [lines[n - 1] for n in numbers] else F


def _declared_range(cand: Candidate, n_lines: int) -> tuple[int, int]:
    """The input's first and last line numbers: from its ref, or 1..n for a whole file."""
    spec = cand.item.source_ref.get("lines")
    numbers = expand_numbers(spec) if spec is not None else None
    if numbers:
        return numbers[0], numbers[-1]
    return 1, n_lines


def excerpt_with_line_range(asm: Assembly, cand: Candidate, window: tuple):
    out, ref = reduce_code(cand, window)
    return out, ref, check_code(cand, out, ref), "keep_decision_relevant_lines_with_line_range"


def window_budget(max_tokens: int) -> int:
    """The tokens a reduced item's kept text may have: its limit less room for the note line."""
    return max(1, max_tokens - 60)


def code_window(asm: Assembly, cand: Candidate, max_tokens: int) -> tuple[list[str], list[int], int, int, int]:
    """The reducer's estimate: the contiguous run of lines within budget with the most decision-term
    hits, as (lines, hits, a, b, budget) for `lines[a:b]`; `trim_code` checks it by exact count."""
    content = cand.content
    lines = content.splitlines()
    terms = decision_terms(asm, cand)
    budget = window_budget(max_tokens)
    # Line costs are estimated from the item's own tokens per character (counting every line of
    # every item was a third of the engine's time); the exact count trims the chosen window below.
    per_char = max(1, cand.tokens - cand.header_tokens) / max(1, len(content))
    costs = [int(len(line) * per_char) + 1 for line in lines]
    hits = hits_per_part(lines, terms)
    # The contiguous window within budget with the most decision-term hits; earliest on ties.
    best = (-1, 0, 0)
    lo = used = score = 0
    for hi in range(len(lines)):
        used += costs[hi]
        score += hits[hi]
        while used > budget and lo <= hi:
            used -= costs[lo]
            score -= hits[lo]
            lo += 1
        if hi >= lo and score > best[0]:
            best = (score, lo, hi + 1)
    _, a, b = best
    return lines, hits, a, b, budget


def trim_code(asm: Assembly, window: tuple) -> tuple:
    """`code_window`'s run of lines, trimmed until its exact count is within budget."""
    lines, hits, a, b, budget = window
    while b - a > 1 and asm.tokenizer.count("\n".join(lines[a:b])) > budget:
        if hits[b - 1] <= hits[a]:  # give up the end line that matters less
            b -= 1
        else:
            a += 1
    return lines, hits, a, b, budget


def reduce_code(cand: Candidate, window: tuple) -> tuple[str, dict]:
    """The reducer's output: the run of lines of a window `trim_code` brought within budget, with
    the narrowed line range and the full content's hash."""
    lines, _hits, a, b, _budget = window
    first, _last = _declared_range(cand, len(lines))
    body = "\n".join(lines[a:b])
    kept = f"{first + a}-{first + b - 1}" if b > a else "none"
    ref = dict(cand.item.source_ref)
    ref["lines"] = kept
    out = (
        f"{CODE_MARKER}{kept} of {cand.item.source_ref.get('lines', f'1-{len(lines)}')} "
        f"({b - a} of {len(lines)} lines){FULL_CONTENT.format(digest=cand.item.content_hash)}\n{body}"
    )
    return out, ref


def check_code(cand: Candidate, out: str, ref: dict) -> dict[str, AssertionResult]:
    """Facts: the delivered body is non-empty and is exactly the input's lines the narrowed ref names."""
    body = out.split("\n", 1)[1] if "\n" in out else ""
    return {
        "non_empty": P if body.strip() else F,
        "hash_present": P if cand.item.content_hash in out else F,
        "line_range_matches": _range_matches(cand, cand.content.splitlines(), str(ref.get("lines")), body),
    }


def _range_matches(cand: Candidate, lines: list[str], kept: str, body: str) -> AssertionResult:
    """The kept text is exactly lines `kept` of the input, numbered as the input's own ref numbers them."""
    declared = cand.item.source_ref.get("lines")
    if declared is not None:
        numbers = expand_numbers(declared)
        if not numbers or numbers[-1] - numbers[0] + 1 != len(lines):
            return F  # the input's ref does not describe its content: no narrowed range can be true
    first = _declared_range(cand, len(lines))[0]
    claimed = expand_numbers(kept) if kept != "none" else None
    if not claimed or claimed[0] < first or claimed[-1] - first >= len(lines):
        return F
    return P if "\n".join(lines[n - first] for n in claimed) == body else F


def relevant_sections_plus_hash(asm: Assembly, cand: Candidate, window: tuple):
    out, ref = reduce_sections(cand, window)
    return out, ref, check_sections(asm, cand, out, ref), "keep_decision_relevant_sections_and_hash"


def section_window(asm: Assembly, cand: Candidate, max_tokens: int) -> tuple[list[str], list[int], int]:
    """The reducer's estimate: (sections, chosen, budget), the sections that match the decision,
    best first, within budget by estimate; `trim_sections` checks it by exact count."""
    sections = cand.content.split("\n\n")
    terms = decision_terms(asm, cand)
    budget = window_budget(max_tokens)
    # Sections that match the decision, best first; only when none matches, the leading ones.
    hits = hits_per_part(sections, terms)
    matching = [i for i in range(len(sections)) if hits[i]]
    scored = sorted(matching, key=lambda i: (-hits[i], i)) if matching else list(range(len(sections)))
    chosen: list[int] = []
    used = 0
    per_char = max(1, cand.tokens - cand.header_tokens) / max(1, len(cand.content))  # as in code_window
    for i in scored:
        n = int(len(sections[i]) * per_char) + 2
        if used + n <= budget:
            chosen.append(i)
            used += n
    return sections, chosen, budget


def trim_sections(asm: Assembly, window: tuple) -> tuple:
    """`section_window`'s sections, the last-chosen (least relevant) given back until the exact
    count is within budget; the rest in document order."""
    sections, chosen, budget = window
    chosen = list(chosen)
    while len(chosen) > 1 and asm.tokenizer.count("\n\n".join(sections[i] for i in sorted(chosen))) > budget:
        chosen.pop()
    return sections, sorted(chosen), budget


def reduce_sections(cand: Candidate, window: tuple) -> tuple[str, dict]:
    """The reducer's output: the sections of a window `trim_sections` brought within budget, in
    document order, with the narrowed section list and the full content's hash."""
    sections, chosen, _budget = window
    body = "\n\n".join(sections[i] for i in chosen)
    spec = compress_numbers([i + 1 for i in chosen]) if chosen else "none"
    ref = dict(cand.item.source_ref)
    ref["sections"] = spec
    return f"{SECTIONS_MARKER}{spec} of {len(sections)}{FULL_CONTENT.format(digest=cand.item.content_hash)}\n{body}", ref


def _window_body(mode: SourceLimitMode, window: tuple) -> str | None:
    """The text a reducer's first exact count will be asked of (None when it counts nothing)."""
    if mode == SourceLimitMode.EXCERPT_WITH_LINE_RANGE:
        lines, _hits, a, b, _budget = window
        return "\n".join(lines[a:b]) if b - a > 1 else None
    sections, chosen, _budget = window
    return "\n\n".join(sections[i] for i in sorted(chosen)) if len(chosen) > 1 else None


def check_sections(asm: Assembly, cand: Candidate, out: str, ref: dict) -> dict[str, AssertionResult]:
    """Facts: the body is exactly the input's sections the narrowed ref names, each one relevant."""
    body = out.split("\n", 1)[1] if "\n" in out else ""
    sections = cand.content.split("\n\n")
    spec = str(ref.get("sections"))
    claimed = (expand_numbers(spec) or []) if spec != "none" else []
    in_range = all(1 <= n <= len(sections) for n in claimed)
    verbatim = bool(claimed) and in_range and "\n\n".join(sections[n - 1] for n in claimed) == body
    terms = decision_terms(asm, cand)
    hits = hits_per_part(sections, terms)
    any_relevant = any(hits)
    relevant = bool(claimed) and in_range and all(hits[n - 1] for n in claimed)
    return {
        "non_empty": P if body.strip() else F,
        "hash_present": P if cand.item.content_hash in out else F,
        "sections_match_source": P if verbatim else F,
        "sections_relevant": NA if not any_relevant else (P if relevant else F),
    }


# --------------------------------------------------------------------------- the stage


def apply_source_limits(asm: Assembly) -> None:
    """Reduce every over-limit item, in three passes so the exact counts overlap the Python work.

    The reducers' estimates come first, and the text each one's exact count will be asked of is
    handed to the tokenizer to count ahead (on its pool, for a large request) while the next
    estimate is made; then each reduction is checked and its derived item built, whose block is
    counted ahead in turn; then the records are written, in candidate order. The counts are the
    ones a single pass makes: only when they are made differs."""
    # Tool results already carry their call's status and evidence use in their fence header, and
    # were counted with it, since acquisition (`structure.expected_result_headers`).
    reducible: list[tuple[Candidate, SourceLimitMode, int]] = []
    for cand in asm.alive():
        key, limit = _limit_for(asm, cand.item.source_type)
        if limit is None or limit.default == SourceLimitMode.WHOLE:
            continue
        if not cand.counted:
            # Left uncounted for the budget (`acquisition.may_be_evicted_on_a_bound`): reduced by
            # `settle` if the budget gets as far as needing its size, else evicted unreduced.
            cand.pending_limit = (key, limit)
            continue
        entry = _over_limit(asm, cand, key, limit)
        if entry is not None:
            reducible.append(entry)
    _reduce_settled(asm, reducible)


def settle(asm: Assembly, cand: Candidate) -> None:
    """Apply the source limit `apply_source_limits` left pending on `cand`, now that the budget
    needs its size: exactly what that stage would have done (reduce, or exclude)."""
    if cand.pending_limit is None:
        return
    key, limit = cand.pending_limit
    cand.pending_limit = None
    entry = _over_limit(asm, cand, key, limit)
    if entry is not None:
        _reduce_settled(asm, [entry])


def reduced_fixed_text(mode: SourceLimitMode, cand: Candidate) -> str:
    """Text every reduction of `cand` in `mode` contains, whatever it keeps (`reduce_code`,
    `reduce_sections`, `reduce_log`), as lines: for a lower bound of the reduced item
    (`budget.floor_of`). Each line starts and ends where the output has a space or punctuation,
    so the letter and digit runs within it are runs of the output too."""
    digest = cand.item.content_hash
    if mode == SourceLimitMode.EXCERPT_WITH_LINE_RANGE:
        return f"{CODE_MARKER}\n{FULL_CONTENT.format(digest=digest)}"
    if mode == SourceLimitMode.RELEVANT_SECTIONS_PLUS_HASH:
        return f"{SECTIONS_MARKER}\n{FULL_CONTENT.format(digest=digest)}"
    if mode == SourceLimitMode.FAILURES_PLUS_ARTIFACT_REF:
        return f"{LOG_MARKER}\n{LOG_DIGEST.format(digest=digest)}"
    return ""


def _over_limit(asm: Assembly, cand: Candidate, key: str, limit) -> tuple[Candidate, SourceLimitMode, int] | None:
    """(cand, mode, max_tokens) when `cand` is to be reduced; None when it is within its limit or
    was excluded because the policy does not let it be reduced."""
    transforms = asm.policy.transforms
    max_tokens = limit.max_tokens or DEFAULT_EXCERPT_TOKENS
    if limit.default != SourceLimitMode.FAILURES_PLUS_ARTIFACT_REF and cand.tokens <= max_tokens:
        return None
    if not transforms.runs(TransformType.EXCERPT, TransformTrigger.OVER_SOURCE_LIMIT):
        why = (
            "transforms.allowed has no 'excerpt'"
            if TransformType.EXCERPT not in transforms.allowed
            else f"transforms.trigger {transforms.trigger.value!r} does not run source-limit reductions"
        )
        detail = f"over its source limit source_limits.{key} ({limit.default.value}) and not reduced: {why}"
        cand.exclude(Exclusion(ExclusionReason.BUDGET_EVICTED, detail, "source_limits"))
        if cand.item.required:
            asm.block(BlockedReason.REQUIRED_PARTITION_MISSING, [cand.item_id], f"required item {cand.item_id}: {detail}", BlockedCause.BUDGET_EXHAUSTED)
        return None
    return cand, limit.default, max_tokens


def _reduce_settled(asm: Assembly, reducible: list[tuple[Candidate, SourceLimitMode, int]]) -> None:
    started: list[str] = []
    try:
        _reduce(asm, reducible, started)
    finally:  # whatever happened, the tokenizer holds no count this started ahead
        settle_ahead(asm, started)


def _reduce(asm: Assembly, reducible: list[tuple[Candidate, SourceLimitMode, int]], ahead_keys: list[str]) -> None:
    """The three passes of `apply_source_limits` over the items it found over their limits (the
    keys of the counts it starts ahead go to `ahead_keys`)."""
    windows: dict[int, tuple] = {}
    keys: dict[int, tuple] = {}
    known = _windows_known(asm.tokenizer)
    remembered: set[int] = set()
    ahead: list[tuple[str | None, str]] = []
    for cand, mode, max_tokens in reducible:
        if mode == SourceLimitMode.FAILURES_PLUS_ARTIFACT_REF:
            continue
        keys[id(cand)] = key = _window_key(asm, cand, mode, max_tokens)
        trimmed = known.get(key) if known is not None else None
        if trimmed is not None:  # the window this item was reduced to before: no estimate to make
            windows[id(cand)] = _window_of(cand, mode, trimmed, max_tokens)
            remembered.add(id(cand))
            continue
        window = code_window(asm, cand, max_tokens) if mode == SourceLimitMode.EXCERPT_WITH_LINE_RANGE else section_window(asm, cand, max_tokens)
        windows[id(cand)] = window
        body = _window_body(mode, window)
        if body is not None:
            ahead.append((None, body))
    ahead_keys += count_ahead(asm, ahead)

    started = []
    for cand, mode, max_tokens in reducible:
        if mode == SourceLimitMode.FAILURES_PLUS_ARTIFACT_REF:
            out, ref, assertions, objective = failures_plus_artifact_ref(cand)
        else:
            window = _trimmed(asm, cand, mode, windows[id(cand)], max_tokens, remembered=id(cand) in remembered)
            if known is not None:
                if len(known) >= KNOWN_WINDOWS:
                    known.clear()
                known[keys[id(cand)]] = _window_indices(mode, window)
            if mode == SourceLimitMode.EXCERPT_WITH_LINE_RANGE:
                out, ref, assertions, objective = excerpt_with_line_range(asm, cand, window)
            else:
                out, ref, assertions, objective = relevant_sections_plus_hash(asm, cand, window)
        started.append(
            begin_transform(
                asm, cand, out, assertions, TransformType.EXCERPT, objective, f"source-limit/{mode.value}/v2",
                narrowed_ref=ref, trigger=TransformTrigger.OVER_SOURCE_LIMIT.value,
            )
        )
    for t in started:  # kept for finish_transform: built once, counted ahead, then asked for
        if not t.failed:
            t.count_parts = block_count_parts(asm, t.cand)
    ahead_keys += count_ahead(asm, [t.count_parts for t in started if t.count_parts is not None])
    for t in started:
        finish_transform(asm, t)


# The windows items were reduced to, per tokenizer (a worker's lives for many jobs): the agent's
# next step sends most over-limit items again unchanged, and their windows are the same (see
# `_window_key`), so only the reducers' cheap part runs again, and the facts checked on the output
# are checked again on every assembly. Cleared when full.
_KNOWN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
KNOWN_WINDOWS = 20_000


def _windows_known(tokenizer) -> dict | None:
    try:
        return _KNOWN.setdefault(tokenizer, {})
    except TypeError:  # a tokenizer that cannot be weakly referenced: every window is estimated
        return None


def _window_key(asm: Assembly, cand: Candidate, mode: SourceLimitMode, max_tokens: int) -> tuple:
    """All a window depends on: the content, the decision terms, the limit and the counts the
    estimate scales by (the trimming's exact counts are this tokenizer's)."""
    return (mode.value, cand.content_digest, _terms_key(asm, cand), max_tokens, cand.tokens, cand.header_tokens)


def _terms_key(asm: Assembly, cand: Candidate) -> str:
    """A digest of the decision terms (the task's, digested once per assembly, or the item's claim's)."""
    if cand.item.claim:
        return sha256_text("\n".join(sorted(decision_terms(asm, cand))))
    if asm.task_terms_key is None:
        asm.task_terms_key = sha256_text("\n".join(sorted(decision_terms(asm, cand))))
    return asm.task_terms_key


def _window_of(cand: Candidate, mode: SourceLimitMode, trimmed: tuple, max_tokens: int) -> tuple:
    """A window rebuilt from its remembered indices, as trimmed (a code window's `hits` are None:
    they were only needed to trim it)."""
    budget = window_budget(max_tokens)
    if mode == SourceLimitMode.EXCERPT_WITH_LINE_RANGE:
        a, b = trimmed
        return cand.content.splitlines(), None, a, b, budget
    return cand.content.split("\n\n"), list(trimmed), budget


def _trimmed(asm: Assembly, cand: Candidate, mode: SourceLimitMode, window: tuple, max_tokens: int, *, remembered: bool) -> tuple:
    """The window trimmed to its budget by exact count. A remembered one is within it already,
    which its count confirms (else it is estimated afresh, as if it had never been seen)."""
    code = mode == SourceLimitMode.EXCERPT_WITH_LINE_RANGE
    if remembered:
        body = _window_body(mode, window)
        if body is None or asm.tokenizer.count(body) <= window[-1]:
            return window
        window = code_window(asm, cand, max_tokens) if code else section_window(asm, cand, max_tokens)
    return trim_code(asm, window) if code else trim_sections(asm, window)


def _window_indices(mode: SourceLimitMode, window: tuple) -> tuple:
    if mode == SourceLimitMode.EXCERPT_WITH_LINE_RANGE:
        return window[2], window[3]
    return tuple(window[1])


@dataclass
class _Started:
    """A transform whose derived item is built (unless an assertion failed) and whose record is not yet written."""

    cand: Candidate
    before: Any
    before_text: str
    before_tokens: int | None
    failed: list[str]
    record_id: str
    out_digest: str | None
    out: str
    assertions: dict
    ttype: TransformType
    objective: str
    transformer: str
    trigger: str | None
    stage: str
    count_parts: tuple[str | None, str] | None = None  # the derived item's block_count_parts, once built


def record_transform(asm, cand, out, assertions, ttype, objective, transformer, *, narrowed_ref=None, trigger=None, stage="source_limits") -> None:
    """Replace a candidate by its checked reduction (a derived item) and write its TransformRecord."""
    finish_transform(asm, begin_transform(asm, cand, out, assertions, ttype, objective, transformer, narrowed_ref=narrowed_ref, trigger=trigger, stage=stage))


def begin_transform(asm, cand, out, assertions, ttype, objective, transformer, *, narrowed_ref=None, trigger=None, stage="source_limits") -> _Started:
    """The first half of `record_transform`: unless an assertion failed, the candidate becomes its derived item."""
    before = cand.item  # the input of this transform (an earlier transform's output, if one ran)
    failed = [name for name, result in assertions.items() if result == AssertionResult.FAILED]
    record_id = f"transform-{cand.item_id}-{ttype.value}"
    started = _Started(
        cand=cand, before=before, before_text=cand.content, before_tokens=cand.tokens, failed=failed, record_id=record_id,
        out_digest=None if failed else sha256_text(out), out=out, assertions=assertions, ttype=ttype,
        objective=objective, transformer=transformer, trigger=trigger, stage=stage,
    )
    if not failed:
        received = before
        lineage = list(received.source_lineage)
        if not lineage:
            lineage.append(LineageNode(node_id=f"{cand.item_id}@received", type=received.source_type, digest=received.content_hash))
        lineage.append(
            LineageNode(
                node_id=f"{cand.item_id}#{ttype.value}",
                type=ttype.value,
                digest=started.out_digest,
                input_node_ids=[lineage[-1].node_id],
                input_digest=received.content_hash,
                transform_record_id=record_id,
            )
        )
        cand.received = cand.received or received
        cand.item = received.model_copy(
            update={
                "content": out,
                "content_hash": started.out_digest,
                "source_ref": narrowed_ref if narrowed_ref is not None else received.source_ref,
                "source_lineage": lineage,
            }
        )
        cand.content = out
        cand.changed_digest = started.out_digest
    return started


def finish_transform(asm, t: _Started) -> None:
    """The second half: count the derived item's block, write the record, exclude on a failed assertion."""
    cand = t.cand
    after_tokens = None if t.failed else block_tokens(asm, cand, t.count_parts)
    trust = cand.trust.value if cand.trust else "unlabelled"
    asm.transforms.append(
        TransformRecord(
            record_id=t.record_id,
            type=t.ttype,
            input_item_ids=[cand.item_id],
            input_digest=t.before.content_hash,
            objective=t.objective,
            policy_version=asm.policy.label,
            transformer_version=t.transformer,
            output_item_id=cand.item_id,
            output_digest=t.out_digest,
            preservation_assertions=t.assertions,
            token_estimate_before=t.before_tokens,
            token_estimate_after=after_tokens,
            trust_before=trust,
            trust_after=trust,
            status="blocked" if t.failed else "applied",
            before_excerpt=_excerpt(t.before_text),
            after_excerpt="" if t.failed else _excerpt(t.out),
            trigger=t.trigger,
        )
    )
    cand.transform_record_id = t.record_id
    if t.failed:
        detail = "preservation assertions failed: " + ", ".join(t.failed)
        cand.exclude(Exclusion(ExclusionReason.TRANSFORM_BLOCKED, detail, t.stage, failed_assertions=t.failed))
        if cand.item.required:
            asm.block(BlockedReason.TRANSFORM_BLOCKED, [cand.item_id], f"required item {cand.item_id}: {detail}")
        return
    cand.tokens = after_tokens or 0


EXCERPT_GAP = "\n…\n"  # between the head and the tail of a long excerpt


def _excerpt(text: str, limit: int = 1200) -> str:
    return text if len(text) <= limit else text[: limit // 2] + EXCERPT_GAP + text[-limit // 2 :]
