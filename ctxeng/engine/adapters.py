"""Stage 8b — provider adapters: `openai_chat` and `anthropic_messages`.

Contract: an adapter turns the assembly input into the exact payload a provider accepts, and
nothing else: the control text becomes the system message (OpenAI) or top-level `system`
(Anthropic); every other block, trusted or not, is user-side content; tool pairs become an
assistant turn of tool calls followed by their results, in assistant source order, with no call
left without its result. A result that is not a plain success reaches the model as such: its text
starts with a `[ctxeng: tool result status: ...; evidence_use: ...]` line (both providers), and
Anthropic's `is_error` is true for `error` and `canceled` results and synthetic ones.

Turn positions (1.1.0): a conversation's turns (`transcript` of the assembly input) follow the
context message and the context's own tool pairs, each turn where it stood in the history: a user
turn is a user message, an assistant turn an assistant message with its text and the calls it made,
followed by their results (OpenAI: `tool` messages; Anthropic: the next user message's
`tool_result` blocks). OpenAI keeps every turn its own message; Anthropic, which requires the roles
to alternate, joins a turn to the message before it when both have the same role. Without turns
the payload is exactly 1.0.0's. Adapters are registered explicitly, in a fixed order, and each has a
version recorded in the manifest with the policy's serialization version.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .render import EMPTY_USER, needs_placeholder, system_text, transcript_entries


@dataclass(frozen=True)
class Adapter:
    name: str
    version: str
    serialize: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]


def _user_text_parts(inp: dict[str, Any]) -> list[dict[str, Any]]:
    parts = [{"type": "text", "text": b["text"]} for b in inp["blocks"]]
    return parts or [{"type": "text", "text": EMPTY_USER}]


def _opening(inp: dict[str, Any]) -> list[dict[str, Any]]:
    """The context message's text parts: its blocks, or the placeholder when the payload would not
    otherwise open with a user message; none when a user turn opens it."""
    if inp["blocks"] or needs_placeholder(inp):
        return _user_text_parts(inp)
    return []


def status_line(pair: dict[str, Any]) -> str | None:
    """The first line of a tool result that is not a plain success: what the model may rely on."""
    if pair["result"]["synthetic"]:
        return None  # the synthetic result states its own status
    return result_status_line(pair["status"], pair.get("evidence_use"))


def result_status_line(status: str, use: str | None) -> str | None:
    if status == "success" and use != "diagnostic_only":
        return None
    return f"[ctxeng: tool result status: {status}; evidence_use: {use}]"


def result_text(pair: dict[str, Any]) -> str:
    line = status_line(pair)
    text = pair["result"]["text"]
    return f"{line}\n{text}" if line else text


def _openai_pairs(pairs: list[dict[str, Any]], content: str | None = None) -> list[dict[str, Any]]:
    calls = [{"id": p["call_id"], "type": "function", "function": {"name": p["tool_name"], "arguments": p["arguments_json"]}} for p in pairs]
    messages: list[dict[str, Any]] = [{"role": "assistant", "content": content, "tool_calls": calls}]
    messages += [{"role": "tool", "tool_call_id": p["call_id"], "content": result_text(p)} for p in pairs]
    return messages


def openai_chat(inp: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system_text(inp)}]
    opening = _opening(inp)
    if opening:
        messages.append({"role": "user", "content": opening})
    if inp["tool_pairs"]:
        messages += _openai_pairs(inp["tool_pairs"])
    # Each turn is its own message: a user turn's blocks as text parts, an assistant turn's text
    # as its content (several blocks joined by a newline) with the calls it made, then their results.
    for turn in transcript_entries(inp):
        texts = [b["text"] for b in turn["blocks"]]
        if turn["speaker"] == "user":
            messages.append({"role": "user", "content": [{"type": "text", "text": t} for t in texts]})
        elif turn["tool_pairs"]:
            messages += _openai_pairs(turn["tool_pairs"], "\n".join(texts) if texts else None)
        else:
            messages.append({"role": "assistant", "content": "\n".join(texts)})
    payload: dict[str, Any] = {"model": model["name"], "messages": messages}
    if inp["tools"]:
        payload["tools"] = [
            {"type": "function", "function": {"name": t["name"], "description": t["description"], "parameters": t["parameters"]}}
            for t in inp["tools"]
        ]
    return payload


def _anthropic_calls(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "tool_use", "id": p["call_id"], "name": p["tool_name"], "input": json.loads(p["arguments_json"])} for p in pairs]


def _anthropic_results(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "tool_result", "tool_use_id": p["call_id"], "content": result_text(p), "is_error": p["is_error"]} for p in pairs]


def _append(messages: list[dict[str, Any]], role: str, content: list[dict[str, Any]]) -> None:
    """Anthropic wants user and assistant to alternate: a turn of the same role as the message
    before it (a user turn after tool results, two assistant turns whose user turn between them
    was evicted) joins that message as further content blocks, in order."""
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"].extend(content)
    else:
        messages.append({"role": role, "content": content})


def anthropic_messages(inp: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    opening = _opening(inp)
    if opening:
        _append(messages, "user", opening)
    if inp["tool_pairs"]:
        _append(messages, "assistant", _anthropic_calls(inp["tool_pairs"]))
        _append(messages, "user", _anthropic_results(inp["tool_pairs"]))
    for turn in transcript_entries(inp):
        texts = [{"type": "text", "text": b["text"]} for b in turn["blocks"]]
        if turn["speaker"] == "user":
            _append(messages, "user", texts)
        else:
            _append(messages, "assistant", texts + _anthropic_calls(turn["tool_pairs"]))
            if turn["tool_pairs"]:
                _append(messages, "user", _anthropic_results(turn["tool_pairs"]))
    payload: dict[str, Any] = {
        "model": model["name"],
        "max_tokens": model["max_tokens"],
        "system": system_text(inp),
        "messages": messages,
    }
    if inp["tools"]:
        payload["tools"] = [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]} for t in inp["tools"]]
    return payload


ADAPTERS: dict[str, Adapter] = {
    "openai_chat": Adapter("openai_chat", "1.1.0", openai_chat),
    "anthropic_messages": Adapter("anthropic_messages", "1.1.0", anthropic_messages),
}


def get_adapter(name: str) -> Adapter | None:
    return ADAPTERS.get(name)
