"""Superseded writes: an earlier write call's large arguments elided (issue 47; `transforms.allowed:
[elide_superseded]`).

Contract: a *write* is a tool result whose `source_ref` says `access: write` (`versions.readings`);
its call is the request's tool call with the same `call_id`. A write W1 is **superseded** when, for
every object it writes, a later write W2 of the same object (all of its identity) *replaces* what
W1's range held (`source_ref.replaces: true`: new content in place of the old, not an edit of it;
a whole write covers any range, a write of stated lines only those lines). An edit (a diff, a
str_replace) leaves what an earlier edit wrote in place, so it never makes the earlier one's
arguments obsolete. *Later* is a
later assistant turn: both calls state their `turn` and W2's is greater (calls of one turn are
concurrent, never later; calls without a turn are never ordered here). W2 counts only when its call
did not fail (`error`, `canceled`) and its result is still admitted when this runs (after gates,
ranking and source limits, before the budget, so the budget counts the elided form). The first
such write after W1 is the one named.

When the policy lists `elide_superseded` in `transforms.allowed`, W1's call arguments are rewritten
for the payload only: every string longer than `MIN_CHARS` characters, at any depth, is replaced by
`[elided by ctxeng: superseded by the write in call <id>]` (the serialized id the payload carries),
except under an identity argument (`IDENTITY_ARGUMENTS`, or a value equal to one of the object's
identity values: its path, repo, URL ...). Keys, nesting, numbers and short strings stay, so the
arguments are still a JSON object with the same keys. The call stays paired with its result (which
is not touched), `canonical_argument_hash` stays the hash of the arguments as received, and the
payload remains a function of the admitted items (no randomness).

Each elision writes a TransformRecord (`type: elide_superseded`, `trigger: superseded_write`,
input and output: W1's result item) whose assertions are computed on the rewritten arguments:

- `call_paired`: exactly one pair carries this call, and its result is the write's admitted item;
- `same_keys`: the rewritten arguments parse to a JSON object of the same keys and shape;
- `identity_arguments_unchanged`: every argument naming the object (by name or by value) is
  byte-equal to the original (`not_applicable` when none does);
- `only_long_strings_elided`: every changed value was a string longer than `MIN_CHARS`;
- `marker_names_a_later_write`: each call the markers name (read back from the rewritten text) is
  a call of the request, at a later turn, whose admitted result writes the same object.

A failed assertion leaves the arguments whole and the record `status: blocked`: nothing is lost,
the call is only not shortened. Without the clause nothing here runs.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .hashing import fence_safe_json, sha256_json, sha256_text
from .models import TransformRecord
from .render import escape_strings
from .versions import Reading, readings
from .vocabulary import AssertionResult, ToolResultStatus, TransformType
from .working import Assembly, Candidate, ToolPair

MIN_CHARS = 200
# Argument names that say which object a call acts on (or how, for an editor's `command`): kept whole.
IDENTITY_ARGUMENTS = frozenset({"path", "file_path", "filename", "repo", "url", "artifact_id", "memory_id", "object",
                                "within", "command", "plan_id", "id"})
TRANSFORMER = "ctxeng-elide-superseded/1"
TRIGGER = "superseded_write"
_FAILED_CALL = (ToolResultStatus.ERROR, ToolResultStatus.CANCELED)
_MARKER = "[elided by ctxeng: superseded by the {what} in {calls}]"
_MARKER_CALLS = re.compile(r"\[elided by ctxeng: superseded by the writes? in calls? ([A-Za-z0-9_, -]+)\]")


def marker(call_ids: list[str]) -> str:
    if len(call_ids) == 1:
        return _MARKER.format(what="write", calls=f"call {call_ids[0]}")
    return _MARKER.format(what="writes", calls="calls " + ", ".join(call_ids))


def _covers(later: Reading, earlier: Reading) -> bool:
    """Does `later`'s stated range hold all of `earlier`'s (a part of unknown lines covers only itself)?"""
    if later.whole:
        return True
    if later.part is not None or earlier.part is not None:
        return later.part == earlier.part and later.lines == earlier.lines
    if earlier.lines is None:
        return False
    assert later.lines is not None
    return all(any(a <= lo and (b is None or (hi is not None and hi <= b)) for a, b in later.lines)
               for lo, hi in earlier.lines)


def _writes(cand: Candidate | None) -> list[Reading]:
    return [r for r in readings(cand) if r.write] if cand is not None else []


def _superseders(asm: Assembly, pair: ToolPair, written: list[Reading]) -> list[ToolPair] | None:
    """For each object `pair`'s write wrote, the first later admitted write covering it; None when
    one object has none."""
    turn = pair.call.turn
    if turn is None:
        return None
    later = [p for p in asm.pairs if p.call.turn is not None and p.call.turn > turn and p.resolved
             and p.call.status not in _FAILED_CALL]
    later.sort(key=lambda p: (p.call.turn, p.source_order))
    out: list[ToolPair] = []
    for r in written:
        by = next((p for p in later if any(w.key == r.key and w.replaces and _covers(w, r) for w in _writes(p.result))), None)
        if by is None:
            return None
        if by not in out:
            out.append(by)
    return out


def _identity_values(written: list[Reading]) -> set[str]:
    return {v for r in written for v in r.key[1:] if v}


def _elide(value: Any, text: str, identity: set[str], key: str | None = None) -> Any:
    if key is not None and key in IDENTITY_ARGUMENTS:
        return value
    if isinstance(value, str):
        return text if len(value) > MIN_CHARS and value not in identity else value
    if isinstance(value, dict):
        return {k: _elide(v, text, identity, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_elide(v, text, identity) for v in value]
    return value


def _changes(before: Any, after: Any) -> list[tuple[Any, Any]]:
    """The (original, new) leaf values that differ, walking both in step (same shape assumed)."""
    if isinstance(before, dict) and isinstance(after, dict):
        return [c for k in before for c in _changes(before[k], after.get(k))]
    if isinstance(before, list) and isinstance(after, list):
        return [c for b, a in zip(before, after, strict=False) for c in _changes(b, a)]
    return [] if before == after else [(before, after)]


def _identity_kept(before: dict, after: dict, identity: set[str]) -> AssertionResult:
    """Every argument naming the object, by name or by value, at any depth, unchanged."""
    seen = []

    def walk(b: Any, a: Any, key: str | None) -> None:
        if (key in IDENTITY_ARGUMENTS) or (isinstance(b, str) and b in identity):
            seen.append(b == a)
        elif isinstance(b, dict) and isinstance(a, dict):
            for k in b:
                walk(b[k], a.get(k), k)
        elif isinstance(b, list) and isinstance(a, list):
            for x, y in zip(b, a, strict=False):
                walk(x, y, None)

    walk(before, after, None)
    if not seen:
        return AssertionResult.NOT_APPLICABLE
    return AssertionResult.PASSED if all(seen) else AssertionResult.FAILED


def _ok(flag: bool) -> AssertionResult:
    return AssertionResult.PASSED if flag else AssertionResult.FAILED


def check_elision(asm: Assembly, pair: ToolPair, original_json: str, new_json: str) -> dict[str, AssertionResult]:
    """The record's assertions, computed from the rewritten arguments and the request (module docstring)."""
    before = json.loads(original_json)
    try:
        after = json.loads(new_json)
    except ValueError:
        after = None
    carrying = [p for p in asm.pairs if p.call.call_id == pair.call.call_id]
    result = pair.result
    paired = (len(carrying) == 1 and result is not None and result.alive and result.item.call_id == pair.call.call_id
              and pair.call.result_item_id == result.item_id)
    shaped = isinstance(after, dict) and _same_shape(before, after)
    written = _writes(result)
    identity = {escape_strings(v) for v in _identity_values(written)}
    changes = _changes(before, after) if isinstance(after, dict) else [(before, after)]
    long_only = bool(changes) and all(isinstance(b, str) and len(b) > MIN_CHARS and isinstance(a, str) for b, a in changes)
    named = [c.strip() for m in _MARKER_CALLS.finditer(new_json) for c in m.group(1).split(",")]
    by_sid = {p.serialized_call_id: p for p in asm.pairs}
    keys = {r.key for r in written}
    later = bool(named) and all(
        sid in by_sid and by_sid[sid].call.turn is not None and pair.call.turn is not None
        and by_sid[sid].call.turn > pair.call.turn and by_sid[sid].resolved
        and keys & {w.key for w in _writes(by_sid[sid].result)}
        for sid in dict.fromkeys(named)
    )
    return {
        "call_paired": _ok(paired),
        "same_keys": _ok(bool(shaped)),
        "identity_arguments_unchanged": _identity_kept(before, after, identity) if isinstance(after, dict) else AssertionResult.FAILED,
        "only_long_strings_elided": _ok(long_only),
        "marker_names_a_later_write": _ok(later),
    }


def _same_shape(before: Any, after: Any) -> bool:
    if isinstance(before, dict):
        return isinstance(after, dict) and list(before) == list(after) and all(_same_shape(before[k], after[k]) for k in before)
    if isinstance(before, list):
        return isinstance(after, list) and len(before) == len(after) and all(_same_shape(b, a) for b, a in zip(before, after, strict=True))
    return type(before) is type(after) or isinstance(before, str) and isinstance(after, str)


def elide_superseded_writes(asm: Assembly) -> None:
    """Rewrite the arguments of every superseded write's call for the payload (module docstring)."""
    if TransformType.ELIDE_SUPERSEDED not in asm.policy.transforms.allowed:
        return
    for pair in asm.pairs:
        if not pair.resolved or pair.call.status in _FAILED_CALL:
            continue
        written = _writes(pair.result)
        if not written:
            continue
        by = _superseders(asm, pair, written)
        if not by:
            continue
        identity = _identity_values(written)
        text = marker([p.serialized_call_id for p in by])
        elided = _elide(pair.call.arguments, text, identity)
        if elided == pair.call.arguments:
            continue  # nothing long enough to elide: no transform, no record
        new_json = fence_safe_json(escape_strings(elided))
        assertions = check_elision(asm, pair, pair.arguments_json, new_json)
        failed = any(v == AssertionResult.FAILED for v in assertions.values())
        count = asm.tokenizer.count
        before = pair.call_base_tokens
        after = count(pair.call.tool_name) + count(new_json) + 2 * count(pair.serialized_call_id)
        result = pair.result
        assert result is not None
        trust = result.trust.value if result.trust else "unlabelled"
        asm.transforms.append(TransformRecord(
            record_id=f"transform-{result.item_id}-elide_superseded",
            type=TransformType.ELIDE_SUPERSEDED,
            input_item_ids=[result.item_id],
            input_digest=sha256_json(pair.call.arguments),
            objective=(f"elide the long arguments of call {pair.call.call_id!r} ({pair.call.tool_name}): "
                       + "; ".join(f"{r.label} rewritten" for r in written)
                       + " by the later " + ", ".join(f"call {p.call.call_id!r} (turn {p.call.turn})" for p in by)),
            policy_version=asm.policy.label,
            transformer_version=TRANSFORMER,
            output_item_id=result.item_id,
            output_digest=None if failed else sha256_text(new_json),
            preservation_assertions=assertions,
            token_estimate_before=before,
            token_estimate_after=None if failed else after,
            trust_before=trust,
            trust_after=trust,
            status="blocked" if failed else "applied",
            before_excerpt=pair.arguments_json[:1200],
            after_excerpt=new_json[:1200],
            trigger=TRIGGER,
        ))
        if not failed:
            pair.arguments_json = new_json
            pair.call_base_tokens = after
