"""What a reviewer recognises an item by, in place of its id: pure functions, no queries.

`ref_label` reads only the sealed decision (kind and source_ref): a tool's name and the object it
declares (`read_file(src/app.py)`, never `read_file()`), a file's path and lines (and repository),
a URL, an artifact's id and revision, a memory or summary id.
`candidate_label` also reads the item as the agent submitted it, with the request's tool calls: a
tool result is named by its call, `search(query="retry", limit=5) → result`; a conversation
message, or an item whose source_ref names nothing, by its first words: `user: “Summarise the…”`.
Submitted content is gone after a content purge; the label then falls back to `ref_label`.
The seal stores each decision's `request_labels` label (`ItemDecision.label`), so the pages that
list many items (the run's matrix, the inspector's list) show it without reading any request.

Labels are plain text (the templates escape them) and at most LABEL_CHARS characters. A bidi
control (an override, embedding, isolate or mark) in anything a label quotes is shown as "�": a
right-to-left override in a tool argument would otherwise reverse the rest of the label on the
page, the id beside it included (issue 51, N8).
"""

from __future__ import annotations

import json
from typing import Any

LABEL_CHARS = 90
ARGUMENT_CHARS = 32  # one argument's value, before "…"
MESSAGE_WORDS = 10


# U+061C ARABIC LETTER MARK, U+200E/F LRM/RLM, U+202A-E embeddings and overrides, U+2066-9 isolates.
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_NEUTRAL = str.maketrans(dict.fromkeys(BIDI_CONTROLS, "\ufffd"))


def clip(text: str, limit: int) -> str:
    """`text` on one line, bidi controls shown as "�", at most `limit` characters, "…" marking a cut."""
    text = " ".join(text.translate(_NEUTRAL).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def argument_text(value: Any) -> str:
    """One argument as written in a call: strings quoted, anything else as compact JSON, clipped."""
    if isinstance(value, str):
        return json.dumps(clip(value, ARGUMENT_CHARS), ensure_ascii=False)
    return clip(json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")), ARGUMENT_CHARS)


def call_text(tool_name: str, arguments: Any, source_ref: Any = None) -> str:
    """`name(key=value, …)` in the arguments' own order; a call without arguments is named by
    the object its item's source_ref declares, `name(src/app.py)`, else by its name alone: never
    by empty parentheses."""
    args = arguments if isinstance(arguments, dict) else {}
    if args:
        return f"{tool_name}(" + ", ".join(f"{key}={argument_text(value)}" for key, value in args.items()) + ")"
    named = declared_object(source_ref)
    return f"{tool_name}({named})" if named else tool_name


# The source_ref fields that name what a tool read or wrote (ctxeng.engine.versions.OBJECT_KEYS,
# then a search's query), first match wins.
_OBJECT_FIELDS = ("object", "path", "url", "artifact_id", "memory_id", "query")


def declared_object(source_ref: Any) -> str:
    """What a tool item's source_ref says it read or wrote, clipped: its declared `object`, path
    (with lines), URL, artifact or memory id, query, or the first of its `objects`; else the first
    other text it holds beside the tool's name and call id; "" when it names nothing."""
    ref = source_ref if isinstance(source_ref, dict) else {}
    objects = ref.get("objects")
    if not any(ref.get(name) for name in _OBJECT_FIELDS) and isinstance(objects, list) and objects and isinstance(objects[0], dict):
        ref = objects[0]
    for name in _OBJECT_FIELDS:
        if ref.get(name) not in (None, ""):
            lines = f":{ref['lines']}" if name == "path" and ref.get("lines") else ""
            return clip(f"{ref[name]}{lines}", ARGUMENT_CHARS)
    skipped = {"tool_name", "call_id", "access", "lines", "part", "revision", "commit", "replaces", "objects"}
    first = next((str(v) for k, v in ref.items() if k not in skipped and isinstance(v, str | int) and str(v)), "")
    return clip(first, ARGUMENT_CHARS)


def first_words(text: str, limit: int, words: int = MESSAGE_WORDS) -> str:
    """The first `words` words of `text` that fit in `limit` characters, "…" when some are left
    out; cut inside a word only when the first word alone is longer."""
    parts = text.translate(_NEUTRAL).split()
    kept: list[str] = []
    for part in parts[:words]:
        if len(" ".join([*kept, part])) > limit - 1:
            break
        kept.append(part)
    if not kept:
        return clip(parts[0], limit) if parts else ""
    return " ".join(kept) + ("…" if len(kept) < len(parts) else "")


def ref_label(*, item_id: Any, kind: Any, source_ref: Any) -> str:
    """The label the sealed decision alone gives; "" when its ref names nothing beyond the item id."""
    ref = source_ref if isinstance(source_ref, dict) else {}
    kind = str(kind or "")
    if ref.get("tool_name"):
        label = call_text(str(ref["tool_name"]), None, ref) + (f" · call {ref['call_id']}" if ref.get("call_id") else "")
    elif ref.get("path"):
        lines = f":{ref['lines']}" if ref.get("lines") else ""
        label = f"{ref['path']}{lines}" + (f" @ {ref['repo']}" if ref.get("repo") else "")
    elif ref.get("url"):
        label = str(ref["url"])
    elif ref.get("artifact_id"):
        label = f"{kind or 'artifact'} {ref['artifact_id']}" + (f" r{ref['revision']}" if ref.get("revision") is not None else "")
    elif ref.get("memory_id") or ref.get("summary_id"):
        named = ref.get("memory_id") or ref.get("summary_id")
        label = f"{kind} {named}" if named != item_id else kind.replace("_", " ")
    else:
        named = next((str(v) for v in ref.values() if isinstance(v, str | int) and str(v) != item_id), "")
        label = f"{kind} {named}".strip() if named else (kind.replace("_", " ") if kind else "")
    return clip(label, LABEL_CHARS)


def candidate_label(candidate: dict[str, Any], calls: dict[str, dict[str, Any]]) -> str:
    """The label of a submitted candidate (a dict as the request holds it), `calls` the request's
    tool calls by call_id: a tool result by its call (tool name and arguments); a conversation
    message (an item with a turn, or a kind that says message) or an item its ref names nothing
    of by its first words; else `ref_label` (a file, URL, artifact, memory)."""
    item_id, kind = candidate.get("item_id"), str(candidate.get("kind") or "")
    call = calls.get(candidate.get("call_id") or "")
    if call is not None:
        return clip(f"{call_text(str(call.get('tool_name') or '?'), call.get('arguments'), candidate.get('source_ref'))} → result",
                    LABEL_CHARS)
    by_ref = ref_label(item_id=item_id, kind=kind, source_ref=candidate.get("source_ref"))
    content = candidate.get("content")
    turn = candidate.get("turn") if isinstance(candidate.get("turn"), dict) else None
    says_nothing = by_ref in ("", kind.replace("_", " "))
    if isinstance(content, str) and content.strip() and (turn is not None or "message" in kind or says_nothing):
        speaker = turn.get("speaker") if turn else kind.replace("_", " ")
        head = clip(f"{speaker}: “", LABEL_CHARS // 3)
        return head + first_words(content, LABEL_CHARS - len(head) - 1) + "”"  # the quote stays closed
    return by_ref


def request_labels(request: dict[str, Any]) -> dict[str, str]:
    """item_id -> label for every candidate of a submitted request (as stored)."""
    calls = {str(c.get("call_id")): c for c in request.get("tool_calls") or [] if isinstance(c, dict)}
    return {str(c.get("item_id")): candidate_label(c, calls)
            for c in request.get("candidates") or [] if isinstance(c, dict) and c.get("item_id")}
