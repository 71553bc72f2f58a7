"""Stage 8b — provider adapters: `openai_chat` and `anthropic_messages`.

Contract: an adapter turns the assembly input into the exact payload a provider accepts, and
nothing else: the control text becomes the system message (OpenAI) or top-level `system`
(Anthropic); every other block, trusted or not, is user-side content; tool pairs become an
assistant turn of tool calls followed by their results, in assistant source order, with no call
left without its result. A result that is not a plain success reaches the model as such: its text
starts with a `[ctxeng: tool result status: ...; evidence_use: ...]` line (both providers), and
Anthropic's `is_error` is true for `error` and `canceled` results and synthetic ones. Adapters are registered explicitly, in a fixed order, and each has a
version recorded in the manifest with the policy's serialization version.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .render import EMPTY_USER, system_text


@dataclass(frozen=True)
class Adapter:
    name: str
    version: str
    serialize: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]


def _user_text_parts(inp: dict[str, Any]) -> list[dict[str, Any]]:
    parts = [{"type": "text", "text": b["text"]} for b in inp["blocks"]]
    return parts or [{"type": "text", "text": EMPTY_USER}]


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


def openai_chat(inp: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_text(inp)},
        {"role": "user", "content": _user_text_parts(inp)},
    ]
    if inp["tool_pairs"]:
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": p["call_id"], "type": "function", "function": {"name": p["tool_name"], "arguments": p["arguments_json"]}}
                    for p in inp["tool_pairs"]
                ],
            }
        )
        for p in inp["tool_pairs"]:
            messages.append({"role": "tool", "tool_call_id": p["call_id"], "content": result_text(p)})
    payload: dict[str, Any] = {"model": model["name"], "messages": messages}
    if inp["tools"]:
        payload["tools"] = [
            {"type": "function", "function": {"name": t["name"], "description": t["description"], "parameters": t["parameters"]}}
            for t in inp["tools"]
        ]
    return payload


def anthropic_messages(inp: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": _user_text_parts(inp)}]
    if inp["tool_pairs"]:
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": p["call_id"], "name": p["tool_name"], "input": json.loads(p["arguments_json"])}
                    for p in inp["tool_pairs"]
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": p["call_id"], "content": result_text(p), "is_error": p["is_error"]}
                    for p in inp["tool_pairs"]
                ],
            }
        )
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
    "openai_chat": Adapter("openai_chat", "1.0.0", openai_chat),
    "anthropic_messages": Adapter("anthropic_messages", "1.0.0", anthropic_messages),
}


def get_adapter(name: str) -> Adapter | None:
    return ADAPTERS.get(name)
