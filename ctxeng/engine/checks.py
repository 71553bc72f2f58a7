"""Stage 8c — what was rendered and serialized is checked, not assumed (policy `structure.preserve`,
`serialization.preserve`).

Contract: after render and the adapter, the engine re-reads its own output as a consumer would and
compares it with facts it did not produce there: each block's fence header is parsed back and
compared with the admitted item (trust, role, revision, source_ref), each body hashed against the
item's declared content hash, and each tool
pair with the request's calls; the provider payload is walked message by message. Each clause the
policy lists gets `passed` or `failed` in the manifest header (`structure_checks`,
`serialization_checks`); any `failed` blocks the assembly (`transform_blocked`, cause `structure_check_failed`), so no payload
that breaks a preserved property ever leaves the engine.

- source_lineage: every admitted non-control item is sent exactly once, as text whose sha256 is the
  item's declared content hash (a fenced block's body unescaped, a native turn's text as it is),
  and a fenced block's header names its citable id and its compact source reference (the ordered
  lineage hangs off that identity in the manifest);
- revision, trust, intended_role: a fenced header states the item's revision (in its source
  reference) and its trust word (`task`, `state`, `derived`, `untrusted`: one per role); a native
  turn stands in a message of its own speaker, user for task intent, assistant for its own text;
- result_status: each admitted tool result's header states its call's status from the request
  (no `status=` word: success);
- tool_call_result_pair: every call in the assembly input has exactly one result and no call id repeats;
- message_roles: one system/developer message or field, first, and nothing else in that role;
- tool_definitions: every called tool is defined in the payload;
- tool_call_result_pair (payload): every call id is answered by exactly one result, after its call;
- instruction_data_boundary: the system text is the control items' text plus the data-boundary
  notice, nothing else (so no data block, fenced or not, reached it).

The payload walk reads all three adapters' shapes: OpenAI chat (a first system message), Anthropic
(top-level `system`, a string or text blocks, one of which may carry `cache_control`), and the
Responses API (`instructions`; `input` items: user/assistant messages, `function_call` and
`function_call_output` items paired by `call_id`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from .hashing import sha256_text_kept
from .memo import Memo
from .render import (
    DATA_BOUNDARY_NOTICE,
    SYSTEM_SEPARATOR,
    TRUST_WORD,
    cite_id,
    compact_revision,
    header_source,
    in_tool_message,
    split_fences,
    transcript_entries,
    unescape,
    word,
)
from .vocabulary import AssertionResult, Role, SerializationPreserve, StructurePreserve, Zone
from .working import Assembly, Candidate

P, F = AssertionResult.PASSED, AssertionResult.FAILED


def _read_back(entry: dict[str, Any], speaker: str | None) -> dict[str, Any] | None:
    """What a reader finds in one rendered item text: a native turn's text as sent (with the
    speaker of its turn), or a fenced block's parsed header and unescaped body; None when a fenced
    text is not exactly one block."""
    text = entry["text"]
    if entry.get("native"):
        return {"native": True, "speaker": speaker, "body": text}
    kept = _READ_FENCED.kept(text, lambda: (_read_fenced(text),))
    return None if kept[0] is None else dict(kept[0])


# What a reader finds in a fenced text, by the text (a pure function of it): an agent's next step
# sends every earlier block again, byte for byte (issue 48). At most 16,384 texts of 32 M characters.
_READ_FENCED: Memo[tuple[dict[str, Any] | None]] = Memo(16_384, max_chars=32_000_000)


def _read_fenced(text: str) -> dict[str, Any] | None:
    segments = split_fences(text)
    if len(segments) != 1 or segments[0][1] is None:
        return None
    body, header = segments[0]
    return {"native": False, **header, "body": unescape(body)}


def _all_pairs(assembly_input: dict[str, Any]) -> list[dict[str, Any]]:
    return assembly_input["tool_pairs"] + [p for turn in transcript_entries(assembly_input) for p in turn["tool_pairs"]]


def _rendered(assembly_input: dict[str, Any]) -> list[tuple[str | None, dict[str, Any] | None]]:
    """(item id the renderer says it placed, what a reader finds there) for every item text."""
    out = [(b["item_id"], _read_back(b, None)) for b in assembly_input["blocks"]]
    for turn in transcript_entries(assembly_input):
        out += [(b["item_id"], _read_back(b, turn["speaker"])) for b in turn["blocks"]]
    out += [(p["result"]["item_id"], _read_back(p["result"], None)) for p in _all_pairs(assembly_input) if not p["result"]["synthetic"]]
    return out


_SPEAKER_ROLE = {"user": Role.TASK_INTENT, "assistant": Role.DERIVED_CONTEXT}


def structure_checks(asm: Assembly, included: list[Candidate], assembly_input: dict[str, Any]) -> dict[str, AssertionResult]:
    rendered = _rendered(assembly_input)
    by_id: dict[str, list[dict[str, Any]]] = {}
    for item_id, found in rendered:
        if found is not None:
            by_id.setdefault(str(item_id), []).append(found)
    data_items = [c for c in included if c.zone != Zone.CONTROL]
    one_each = all(found is not None for _, found in rendered) and len(rendered) == len(data_items) and all(
        len(by_id.get(c.item_id, [])) == 1 for c in data_items
    )

    def each(native_test, fenced_test) -> AssertionResult:
        def ok(c: Candidate) -> bool:
            found = by_id[c.item_id][0]
            return native_test(c, found) if found["native"] else fenced_test(c, found)
        return P if one_each and all(ok(c) for c in data_items) else F

    def same_content(c: Candidate, found: dict[str, Any]) -> bool:  # the text sent is the item's, by its declared hash
        return sha256_text_kept(found["body"]) == c.item.content_hash

    def role_of_turn(c: Candidate, found: dict[str, Any]) -> bool:
        return _SPEAKER_ROLE.get(found["speaker"]) == c.role and c.item.turn is not None and c.item.turn.speaker == found["speaker"]

    calls = {call.call_id: call for call in asm.request.tool_calls}
    out: dict[str, AssertionResult] = {}
    for key in asm.policy.structure.preserve:
        if key == StructurePreserve.SOURCE_LINEAGE:
            out[key.value] = each(same_content, lambda c, h: same_content(c, h) and (h["source"] or "") == header_source(c)
                                  and h["cite"] == (None if in_tool_message(c) else cite_id(c.item_id)))
        elif key == StructurePreserve.REVISION:
            out[key.value] = each(lambda c, h: c.item.revision is None,
                                  lambda c, h: c.item.revision is None or _states_revision(h["source"] or "", c.item.revision))
        elif key == StructurePreserve.TRUST:
            out[key.value] = each(role_of_turn, lambda c, h: c.trust is not None and h["trust"] == TRUST_WORD.get(c.role))
        elif key == StructurePreserve.INTENDED_ROLE:
            out[key.value] = each(role_of_turn, lambda c, h: h["trust"] == TRUST_WORD.get(c.role))
        elif key == StructurePreserve.RESULT_STATUS:
            results = [c for c in data_items if c.item.call_id is not None]
            out[key.value] = (
                P if one_each and all(by_id[c.item_id][0].get("status") == calls[c.item.call_id].status.value for c in results) else F
            )
        else:
            pairs = _all_pairs(assembly_input)
            ids = [p["call_id"] for p in pairs]
            answered = all(p.get("result") and p["result"].get("text") for p in pairs)
            out[key.value] = P if answered and len(set(ids)) == len(ids) else F
    return out


def _states_revision(source: str, revision: Any) -> bool:
    """Does a header's source reference name the revision (a 40- or 64-hex commit by its first 7)?"""
    return word(f"@{compact_revision(revision)}") in source


def _payload_messages(payload: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """(the system text, the messages or input items after it), for each adapter's payload."""
    if "input" in payload:  # Responses: the system text is `instructions`
        return str(payload.get("instructions") or ""), list(payload["input"])
    messages = list(payload.get("messages", []))
    if "system" in payload:
        system = payload["system"]
        return (system if isinstance(system, str) else SYSTEM_SEPARATOR.join(str(b.get("text", "")) for b in system)), messages
    if messages and messages[0].get("role") in ("system", "developer"):
        content = messages[0]["content"]
        return (content if isinstance(content, str) else "".join(p.get("text", "") for p in content)), messages[1:]
    return "", messages


def _calls_and_results(messages: list[dict[str, Any]]) -> tuple[list[tuple[int, str, str]], list[tuple[int, str]]]:
    calls: list[tuple[int, str, str]] = []
    results: list[tuple[int, str]] = []
    for n, msg in enumerate(messages):
        if msg.get("type") == "function_call":
            calls.append((n, msg.get("call_id", ""), msg.get("name", "")))
        elif msg.get("type") == "function_call_output":
            results.append((n, msg.get("call_id", "")))
        for tc in msg.get("tool_calls") or []:
            calls.append((n, tc["id"], tc["function"]["name"]))
        if msg.get("role") == "tool":
            results.append((n, msg.get("tool_call_id", "")))
        if isinstance(msg.get("content"), list):
            for part in msg["content"]:
                if part.get("type") == "tool_use":
                    calls.append((n, part["id"], part["name"]))
                elif part.get("type") == "tool_result":
                    results.append((n, part.get("tool_use_id", "")))
    return calls, results


def serialization_checks(
    asm: Assembly, included: list[Candidate], payload: dict[str, Any]
) -> dict[str, AssertionResult]:
    system, rest = _payload_messages(payload)
    calls, results = _calls_and_results(rest)
    defined = {t.get("name") or t.get("function", {}).get("name") for t in payload.get("tools", [])}
    out: dict[str, AssertionResult] = {}
    for key in asm.policy.serialization.preserve:
        if key == SerializationPreserve.MESSAGE_ROLES:
            out[key.value] = P if _roles_kept(payload, rest) else F
        elif key == SerializationPreserve.TOOL_DEFINITIONS:
            out[key.value] = P if all(name in defined for _, _, name in calls) else F
        elif key == SerializationPreserve.TOOL_CALL_RESULT_PAIR:
            answered = Counter(cid for _, cid in results)
            call_at = {cid: n for n, cid, _ in calls}
            ok = len(call_at) == len(calls) and set(answered) == set(call_at)
            ok = ok and all(answered[cid] == 1 for cid in call_at) and all(n > call_at[cid] for n, cid in results)
            out[key.value] = P if ok else F
        else:
            controls = [c.content for c in included if c.zone == Zone.CONTROL]
            out[key.value] = P if _only(system, [*controls, DATA_BOUNDARY_NOTICE]) else F
    return out


def _roles_kept(payload: dict[str, Any], rest: list[dict[str, Any]]) -> bool:
    """Nothing after the system text speaks as system or developer: chat messages are user,
    assistant or tool; Responses input items are user or assistant messages or function call
    items; a list-form Anthropic `system` holds text blocks only."""
    if "input" in payload:
        return all(
            m.get("type") in ("function_call", "function_call_output")
            or (m.get("type", "message") == "message" and m.get("role") in ("user", "assistant"))
            for m in rest
        )
    system = payload.get("system")
    if isinstance(system, list) and not all(isinstance(b, dict) and b.get("type") == "text" for b in system):
        return False
    return all(m.get("role") in ("user", "assistant", "tool") for m in rest)


def _only(text: str, parts: list[str]) -> bool:
    """True when `text` is made of exactly `parts` (each once, any order) and whitespace."""
    for part in sorted(parts, key=len, reverse=True):
        if part not in text:
            return False
        text = text.replace(part, "", 1)
    return not text.strip()


def failed(checks: dict[str, AssertionResult]) -> list[str]:
    return [name for name, result in checks.items() if result == F]
