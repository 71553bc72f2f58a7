"""Stage 5 — structure: trust zones and tool call/result pairs (seed §4).

Contract: each admitted item is placed in the zone its intended role maps to (control, task,
state, untrusted data); roles never change here, so untrusted text cannot reach the control zone.
Tool results are paired with calls by `call_id` only, in assistant source order (the order of
`request.tool_calls`); completion order is recorded but never changes pairing or serialized order.
Each pair gets `canonical_argument_hash` = sha256 over the tool name and the canonical JSON of the
arguments, so key order is irrelevant and two calls with the same arguments remain two pairs.
A call whose result is missing or was excluded is *unresolved*: per policy it gets a typed
synthetic result or is left out, so no provider ever sees an orphaned call. Call ids a provider
would reject are rewritten deterministically, the same way on both sides of the pair.
"""

from __future__ import annotations

import hashlib
import re

from .hashing import fence_safe_json, sha256_json_kept
from .memo import Memo, kept_by_value
from .render import escape_strings
from .vocabulary import ROLE_ZONE, EvidenceUse, UnresolvedCallHandling
from .working import Assembly, ToolPair

# Both providers accept this alphabet; OpenAI caps tool call ids at 40 characters.
_SAFE_CALL_ID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


def serialized_call_id(call_id: str) -> str:
    if _SAFE_CALL_ID.match(call_id):
        return call_id
    return "call_" + hashlib.sha256(call_id.encode("utf-8")).hexdigest()[:24]


def canonical_argument_hash(tool_name: str, arguments: dict) -> str:
    return sha256_json_kept({"tool_name": tool_name, "arguments": arguments})


# The payload's text of each call's arguments, by the arguments' frozen JSON: an agent repeats its
# earlier calls at every step (issue 48).
_ARGUMENTS_JSON: Memo[str] = Memo(16_384, max_chars=16_000_000)


def arguments_json(arguments: dict) -> str:
    """The arguments as the payload carries them: every string escaped, then fence-safe JSON."""
    return kept_by_value(_ARGUMENTS_JSON, arguments, lambda: fence_safe_json(escape_strings(arguments)))


def synthetic_result_text(call_id: str, reason: str) -> str:
    return fence_safe_json({"ctxeng_synthetic_result": True, "call_id": call_id, "status": "unknown", "reason": reason})


def evidence_use_for(call, has_result: bool, allowed: set) -> EvidenceUse:
    """What a call's result may be used as: no result is unresolved; a status the policy lists in
    `structure.evidence_use_allowed_for` is evidence, any other diagnostic only."""
    if not has_result:
        return EvidenceUse.UNRESOLVED
    return EvidenceUse.CONFIRMED_BY_POLICY if call.status in allowed else EvidenceUse.DIAGNOSTIC_ONLY


def expected_result_headers(asm: Assembly) -> None:
    """Give each tool result the call status and evidence use its fence header will carry, before
    it is first counted, so the count made once is the count of what is sent."""
    allowed = set(asm.policy.structure.evidence_use_allowed_for)
    by_id = asm.by_id()
    for call in asm.request.tool_calls:
        result = by_id.get(call.result_item_id) if call.result_item_id else None
        if result is not None:
            result.result_status = call.status
            result.evidence_use = evidence_use_for(call, True, allowed)


def incomplete(item) -> bool:
    """A non-tool item its source marks `partial` or `unknown` (a tool result's status is its call's)."""
    return item.call_id is None and item.completeness != "complete"


def expected_completeness_labels(asm: Assembly) -> None:
    """Label each incomplete item `admission.allow_incomplete: [diagnostic]` lets in as a tool result
    of that status is labelled: `status` (its completeness) and `evidence_use: diagnostic_only` in its
    fence header and the manifest, set before it is first counted. Without the clause the
    structural_integrity gate rejects it."""
    if "diagnostic" not in asm.policy.admission.allow_incomplete:
        return
    for cand in asm.candidates:
        if incomplete(cand.item):
            cand.result_status = cand.item.completeness
            cand.evidence_use = EvidenceUse.DIAGNOSTIC_ONLY


def place_in_zones(asm: Assembly) -> None:
    for cand in asm.alive():
        cand.zone = ROLE_ZONE[cand.role]


def pair_tool_calls(asm: Assembly) -> None:
    by_id = asm.by_id()
    allowed = set(asm.policy.structure.evidence_use_allowed_for)
    used_ids: dict[str, str] = {}
    for order, call in enumerate(asm.request.tool_calls):
        sid = serialized_call_id(call.call_id)
        if sid in used_ids and used_ids[sid] != call.call_id:  # astronomically unlikely, but never merge two calls
            sid = "call_" + hashlib.sha256(f"{call.call_id}#{order}".encode()).hexdigest()[:24]
        used_ids[sid] = call.call_id
        result = by_id.get(call.result_item_id) if call.result_item_id else None
        use = evidence_use_for(call, result is not None, allowed)
        args_json = arguments_json(call.arguments)
        pair = ToolPair(
            call=call,
            source_order=order,
            canonical_argument_hash=canonical_argument_hash(call.tool_name, call.arguments),
            serialized_call_id=sid,
            arguments_json=args_json,
            result=result,
            evidence_use=use,
        )
        count = asm.tokenizer.count
        pair.call_base_tokens = count(call.tool_name) + count(args_json) + 2 * count(sid)
        if result is not None:
            result.evidence_use = use
        asm.pairs.append(pair)


def resolve_unresolved(asm: Assembly) -> None:
    """After gates and ranking, mark pairs whose result is gone and decide how to serialize them."""
    handling = asm.policy.structure.unresolved_tool_calls
    for pair in asm.pairs:
        if pair.resolved:
            continue
        pair.evidence_use = EvidenceUse.UNRESOLVED
        pair.unresolved_handling = handling
        if handling == UnresolvedCallHandling.SYNTHETIC_RESULT:
            if pair.result is None:
                why = "no result was returned for this call"
            else:
                why = f"result {pair.result.item_id} was excluded ({pair.result.exclusion.reason.value})"  # type: ignore[union-attr]
            pair.synthetic_result = synthetic_result_text(pair.call.call_id, why)
            pair.synthetic_tokens = asm.tokenizer.count(pair.synthetic_result)
