"""Credentials in the agent's own tool-call arguments (issue 50; `security.secrets_in_call_arguments`).

Contract: the agent's assistant turns reach the payload as the caller sent them, and so do the
arguments of the calls they made (`request.tool_calls[].arguments`): no gate sees them, since they
are not candidates. After the calls are paired (and a superseded write's arguments elided), every
string of each call the payload will carry — a call with an admitted result, or one answered by a
synthetic result — is scanned as content is (`secrets.find_in_json`: every form of
`secrets.find_secrets`, a string under a key read as `key: value`). For each call with a finding:

- `redact`: each finding's span, and only it, is replaced by `[ctxeng:redacted credential]` in the
  payload's copy of the arguments, which stays a JSON object of the same keys and shape (re-checked
  by parsing it back) in which no credential body (a 16+ alphanumeric run of a finding) remains.
  Each finding is recorded on the call's `tool_pairs[]` entry, `argument_redactions`: its field path
  in the request (`tool_calls[2].arguments.env.API_KEY`) and its detector, never the value. The
  call's `canonical_argument_hash` stays the hash of the arguments as received.
- `block`, or a redaction whose check fails: the assembly is blocked, `transform_blocked` with the
  cause `secret_in_call_arguments`, the detail naming the call, each field and detector.

Whatever the clause, a credential of a call's arguments as received is redacted from the excerpts an
earlier elision of the call kept in its record (`before_excerpt`, `after_excerpt`), also one inside
a long string the elision took out of the payload: the manifest never carries it.

Not a §8 mechanism: the clause loads nothing; either value sends less than the call as received.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .gates import REDACTION, redacted_text
from .hashing import fence_safe_json
from .secrets import Finding, find_in_json, find_in_json_text
from .vocabulary import BlockedCause, BlockedReason, TransformType, UnresolvedCallHandling
from .working import Assembly, ToolPair

_SECRET_BODY = re.compile(r"[A-Za-z0-9]{16,}")


def _sent(pair: ToolPair) -> bool:
    """Does the payload carry this call (its result admitted, or a synthetic result in its place)?"""
    return pair.resolved or pair.unresolved_handling == UnresolvedCallHandling.SYNTHETIC_RESULT


def _replaced(value: Any, keys: tuple, found: list[Finding]) -> Any:
    """`value` (parsed JSON) with the string at `keys` redacted; everything else the same objects."""
    if not keys:
        return redacted_text(value, found)
    head, rest = keys[0], keys[1:]
    if isinstance(value, dict):
        return {k: (_replaced(v, rest, found) if k == head else v) for k, v in value.items()}
    return [_replaced(v, rest, found) if i == head else v for i, v in enumerate(value)]


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return type(value).__name__


def _redaction_holds(before: Any, new_json: str, in_args: list[tuple[str, tuple, list[Finding]]]) -> bool:
    """Checked on the text to be sent: it parses to an object of the same keys and shape, and no
    body of a credential found occurs in it."""
    try:
        after = json.loads(new_json)
    except ValueError:
        return False
    bodies = {body for _, _, found in in_args for f in found for body in _SECRET_BODY.findall(f.text)}
    return isinstance(after, dict) and _shape(after) == _shape(before) and not any(b in new_json for b in bodies)


def _scrub_excerpts(asm: Assembly, pair: ToolPair, where: str) -> None:
    """A superseded write's elision ran first and kept excerpts of this call's arguments as received
    in its record (`before_excerpt`, cut at 1200 characters): every credential of the arguments as
    received — also one inside a long string the elision took out of the payload — is redacted
    there, and a credential the cut left a head of (8+ characters) loses that head too."""
    inputs = {pair.result.item_id} if pair.result is not None else set()
    elided = [i for i, record in enumerate(asm.transforms)
              if record.type == TransformType.ELIDE_SUPERSEDED and inputs & set(record.input_item_ids)]
    if not elided:  # no excerpt of this call's arguments was kept: nothing to scan for
        return
    values = [json.dumps(f.text)[1:-1] for _, _, found in find_in_json(pair.call.arguments, where) for f in found]

    def clean(text: str) -> str:
        for value in values:
            text = text.replace(value, REDACTION)
            head = next((k for k in range(len(value) - 1, 7, -1) if text.endswith(value[:k])), None)
            if head is not None:
                text = text[:-head] + REDACTION
        return text

    for i in elided:
        record = asm.transforms[i]
        asm.transforms[i] = record.model_copy(update={"before_excerpt": clean(record.before_excerpt),
                                                      "after_excerpt": clean(record.after_excerpt)})


def handle_call_secrets(asm: Assembly) -> None:
    """Redact or block every credential in the arguments of the calls the payload carries (module docstring)."""
    mode = asm.policy.security.secrets_in_call_arguments
    for pair in asm.pairs:
        if not _sent(pair):
            continue
        where = f"tool_calls[{pair.source_order}].arguments"
        _scrub_excerpts(asm, pair, where)
        # By the text the payload carries (the engine's own, the same string at every step of a run
        # whose call did not change): neither parsed nor frozen again to be scanned.
        in_args = find_in_json_text(pair.arguments_json, where)
        if not in_args:
            continue
        sent = json.loads(pair.arguments_json)
        named = "; ".join(f"{path} ({', '.join(dict.fromkeys(f.type for f in found))})" for path, _, found in in_args)
        if mode == "redact":
            redacted = sent
            for _, keys, found in in_args:
                redacted = _replaced(redacted, keys, found)
            new_json = fence_safe_json(redacted)
            if _redaction_holds(sent, new_json, in_args) and REDACTION in new_json:
                pair.arguments_json = new_json
                count = asm.tokenizer.count
                pair.call_base_tokens = count(pair.call.tool_name) + count(new_json) + 2 * count(pair.serialized_call_id)
                pair.argument_redactions = [(path, f.type) for path, _, found in in_args for f in found]
                continue
            why = "could not be redacted"
        else:
            why = "security.secrets_in_call_arguments: block"
        asm.block(
            BlockedReason.TRANSFORM_BLOCKED,
            [path for path, _, _ in in_args],
            f"call {pair.call.call_id!r} ({pair.call.tool_name}) carries credential-like material in {named} ({why})",
            BlockedCause.SECRET_IN_CALL_ARGUMENTS,
        )
