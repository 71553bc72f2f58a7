"""A structural validator for provider payloads: what OpenAI chat, Anthropic messages and OpenAI
responses accept.

Not the providers' full schemas; the rules the engine could break: roles, where system text may
be, tool call / tool result pairing both ways, Anthropic's user/assistant alternation, and the id
and tool-name alphabets.
"""

from __future__ import annotations

import re
from typing import Any

CALL_ID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def validate_openai_chat(payload: dict[str, Any]) -> None:
    assert isinstance(payload.get("model"), str) and payload["model"]
    messages = payload["messages"]
    assert messages, "no messages"
    for i, msg in enumerate(messages):
        role = msg["role"]
        assert role in ("system", "developer", "user", "assistant", "tool"), role
        if role in ("system", "developer"):
            assert i == 0, "system text only as the first message"
            assert isinstance(msg["content"], str) and msg["content"]
        if role == "user":
            content = msg["content"]
            assert isinstance(content, str) or all(p["type"] == "text" and isinstance(p["text"], str) for p in content)
            assert content, "empty user message"
    for i, msg in enumerate(messages):
        if msg["role"] == "assistant" and msg.get("tool_calls"):
            ids = [tc["id"] for tc in msg["tool_calls"]]
            assert len(set(ids)) == len(ids), "duplicate tool call ids in one turn"
            for tc in msg["tool_calls"]:
                assert CALL_ID.match(tc["id"]), tc["id"]
                assert tc["type"] == "function"
                assert TOOL_NAME.match(tc["function"]["name"]), tc["function"]["name"]
                assert isinstance(tc["function"]["arguments"], str)
            following = []
            for nxt in messages[i + 1 :]:
                if nxt["role"] != "tool":
                    break
                following.append(nxt["tool_call_id"])
            assert sorted(following) == sorted(ids), f"tool messages {following} do not answer calls {ids}"
        if msg["role"] == "tool":
            assert isinstance(msg["content"], str)
            owner = next((m for m in reversed(messages[:i]) if m["role"] != "tool"), None)
            assert owner is not None and owner["role"] == "assistant", "a tool message must follow an assistant tool-call turn"
            assert msg["tool_call_id"] in [tc["id"] for tc in owner.get("tool_calls", [])], "orphaned tool result"
    for tool in payload.get("tools", []):
        assert tool["type"] == "function" and TOOL_NAME.match(tool["function"]["name"])
        assert tool["function"]["parameters"].get("type") == "object"


def validate_anthropic_messages(payload: dict[str, Any]) -> None:
    assert isinstance(payload.get("model"), str) and payload["model"]
    assert isinstance(payload.get("max_tokens"), int) and payload["max_tokens"] > 0
    system = payload.get("system")
    if isinstance(system, list):
        # System blocks (a cache breakpoint splits the system text): Anthropic refuses a text block
        # without non-whitespace text, and a cache_control marks a block that holds some.
        assert system, "an empty system block list"
        marked = 0
        for block in system:
            assert block["type"] == "text" and isinstance(block["text"], str)
            assert block["text"].strip(), "system text blocks must contain non-whitespace text"
            if "cache_control" in block:
                marked += 1
                assert block["cache_control"] in ({"type": "ephemeral"}, {"type": "ephemeral", "ttl": "5m"}, {"type": "ephemeral", "ttl": "1h"})
        assert 1 <= marked <= 4, "a system block list is sent only to carry a cache breakpoint"
    else:
        assert system is None or isinstance(system, str)
    messages = payload["messages"]
    assert messages and messages[0]["role"] == "user", "must start with a user message"
    for i, msg in enumerate(messages):
        assert msg["role"] in ("user", "assistant"), f"role {msg['role']} is not allowed in messages"
        if i:
            assert msg["role"] != messages[i - 1]["role"], "user and assistant must alternate"
        content = msg["content"]
        assert content, "empty message"
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in blocks:
            assert block["type"] in ("text", "tool_use", "tool_result"), block["type"]
            if block["type"] == "text":
                assert block["text"], "text content blocks must be non-empty"
            if block["type"] == "tool_use":
                assert msg["role"] == "assistant"
                assert CALL_ID.match(block["id"]) and TOOL_NAME.match(block["name"])
                assert isinstance(block["input"], dict)
            if block["type"] == "tool_result":
                assert msg["role"] == "user"
                assert isinstance(block["content"], str) and isinstance(block.get("is_error", False), bool)
        uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
        results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        if uses:
            assert len(set(uses)) == len(uses)
            assert i + 1 < len(messages), "a tool_use without a following user turn"
            nxt = messages[i + 1]["content"]
            answered = [b["tool_use_id"] for b in nxt if isinstance(nxt, list) and b["type"] == "tool_result"]
            assert sorted(answered) == sorted(uses), f"tool_results {answered} do not answer tool_uses {uses}"
            first = [b["type"] for b in nxt][: len(uses)]
            assert first == ["tool_result"] * len(uses), "tool_result blocks must come first in the next user turn"
        if results:
            prev = messages[i - 1]["content"] if i else []
            prev_uses = [b["id"] for b in prev if isinstance(prev, list) and b["type"] == "tool_use"]
            assert sorted(results) == sorted(prev_uses), "orphaned tool_result"
    for tool in payload.get("tools", []):
        assert TOOL_NAME.match(tool["name"]) and tool["input_schema"].get("type") == "object"


def validate_openai_responses(payload: dict[str, Any]) -> None:
    """The Responses API's input list: system text only in `instructions`; messages of the user and
    the assistant (user-side parts `input_text`, assistant parts `output_text`); every
    `function_call` answered by exactly one `function_call_output` with its `call_id`, after it,
    and no output answering a call not made; call ids unique; the conversation opens with a user
    message, as the other two adapters' do."""
    assert isinstance(payload.get("model"), str) and payload["model"]
    assert isinstance(payload.get("instructions"), str) and payload["instructions"]
    items = payload["input"]
    assert items, "no input"
    called: list[str] = []
    answered: list[str] = []
    first = items[0]
    assert first.get("type") == "message" and first["role"] == "user", "the input opens with a user message"
    for item in items:
        kind = item["type"]
        if kind == "message":
            assert item["role"] in ("user", "assistant"), f"role {item['role']} belongs in instructions"
            part = "input_text" if item["role"] == "user" else "output_text"
            assert item["content"], "empty message"
            for p in item["content"]:
                assert p["type"] == part and isinstance(p["text"], str), p
        elif kind == "function_call":
            assert CALL_ID.match(item["call_id"]) and TOOL_NAME.match(item["name"])
            assert isinstance(item["arguments"], str)
            assert item["call_id"] not in called, "duplicate call id"
            called.append(item["call_id"])
        else:
            assert kind == "function_call_output", kind
            assert item["call_id"] in called, "orphaned function_call_output"
            assert item["call_id"] not in answered, "a call answered twice"
            assert isinstance(item["output"], str)
            answered.append(item["call_id"])
    assert sorted(called) == sorted(answered), f"calls {called} answered by {answered}"
    for tool in payload.get("tools", []):
        assert tool["type"] == "function" and TOOL_NAME.match(tool["name"]) and tool["parameters"].get("type") == "object"


def validate(payload: dict[str, Any], adapter: str) -> None:
    {"openai_chat": validate_openai_chat, "anthropic_messages": validate_anthropic_messages,
     "openai_responses": validate_openai_responses}[adapter](payload)


def call_ids(payload: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(tool call ids in order, tool result ids in order) in any of the three adapters' payloads."""
    calls, results = [], []
    if "input" in payload:  # openai_responses
        for entry in payload["input"]:
            if entry.get("type") == "function_call":
                calls.append(entry["call_id"])
            elif entry.get("type") == "function_call_output":
                results.append(entry["call_id"])
        return calls, results
    for msg in payload["messages"]:
        for tc in msg.get("tool_calls") or []:
            calls.append(tc["id"])
        if msg["role"] == "tool":
            results.append(msg["tool_call_id"])
        if isinstance(msg.get("content"), list):
            for b in msg["content"]:
                if b.get("type") == "tool_use":
                    calls.append(b["id"])
                if b.get("type") == "tool_result":
                    results.append(b["tool_use_id"])
    return calls, results


# --------------------------------------------------------------------------- fences, read back
# Written from docs/sdk.md "What the model sees", not from ctxeng.engine.render: a data block is
# `<<<ctx CITE KIND TRUST[ SOURCE][ status=S][ diagnostic_only]>>>` (a tool result in its tool
# message: `<<<ctx TRUST[ SOURCE][ status=S][ diagnostic_only]>>>`), a newline, the body, a newline
# and `<<<ctx:end>>>`; an item id of at most 16 characters is its own citable id, a longer one its
# first letter and 9 digits of its sha256.

TRUST_WORDS = ("task", "state", "derived", "untrusted")
FENCE_RE = re.compile(r"<<<ctx (?P<words>[^\n<>]*)>>>\n(?P<body>.*?)\n<<<ctx:end>>>", re.S)


def cite_of(item_id: str) -> str:
    import hashlib

    if len(item_id) <= 16 and item_id not in TRUST_WORDS:
        return item_id
    return item_id[0].lower() + f"{int(hashlib.sha256(item_id.encode()).hexdigest(), 16) % 10**9:09d}"


def fence_headers(text: str) -> list[dict[str, Any]]:
    """Every fence in `text`: its citable id and kind (None in a tool message), trust word, source,
    status, use and body."""
    out = []
    for m in FENCE_RE.finditer(text):
        words = m.group("words").split(" ")
        tool = words[0] in TRUST_WORDS
        cite, kind, trust = (None, None, words[0]) if tool else (words[0], words[1], words[2])
        rest = words[1:] if tool else words[3:]
        status = next((w.removeprefix("status=") for w in rest if w.startswith("status=")), "success")
        use = "diagnostic_only" if "diagnostic_only" in rest else None
        source = next((w for w in rest if not w.startswith("status=") and w != "diagnostic_only"), None)
        out.append({"cite": cite, "kind": kind, "trust": trust, "source": source, "status": status, "use": use,
                    "body": m.group("body")})
    return out


def fence_header(text: str) -> dict[str, Any] | None:
    """The one fence `text` is, or None."""
    found = fence_headers(text)
    return found[0] if len(found) == 1 and FENCE_RE.fullmatch(text) else None
