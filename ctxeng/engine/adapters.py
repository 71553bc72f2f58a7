"""Stage 8b — provider adapters: `openai_chat`, `anthropic_messages` and `openai_responses`.

Contract: an adapter turns the assembly input into the exact payload a provider accepts, and
nothing else: the control text becomes the system message (OpenAI), top-level `system`
(Anthropic) or `instructions` (Responses); every other item is user-side content or its turn's
own message; tool pairs become an assistant turn of tool calls followed by their results, with no
call left without its result. Anthropic's `is_error` is true for `error` and `canceled` results
and synthetic ones; a result's status is in its fence header (`render`).

What the model sees (1.3.0; Responses 1.1.0; issue 37, docs/sdk.md): the system message, the
placeholder only when nothing else would open with a user message, then the conversation turn by
turn (a user turn is a user message with the caller's exact text, an OpenAI user turn the caller's
own string; an assistant turn an assistant message with its text and the calls it made, followed
by their results: OpenAI `tool` messages, Anthropic the next user message's `tool_result` blocks,
Responses `function_call` / `function_call_output` items), with the context message (the fenced
items without a turn, then the context's own tool pairs) just before the newest user turn.
Anthropic, which requires the roles to alternate, joins a message to the one before it when both
have the same role. The caller's own request parameters (`model["params"]`) are passed through
unchanged, except the fields the adapter writes; Anthropic's `max_tokens` and the Responses API's
`max_output_tokens` are the caller's reply size when it gave one, else the policy's
`response_reserve` (the Responses API's minimum is 16; a smaller reserve sends none). Adapters are
registered explicitly, in a fixed order, and each has a version recorded in the manifest with the
policy's serialization version.

Provider caches (1.2.0): the pipeline asks for a marker (`cache.provider_cache_options`) and the
adapter sets it. Anthropic (`cache_breakpoint`): `system` becomes two text blocks, the stable prefix
(the control items of `cache.stable_prefix_sources`) carrying `cache_control: {type: ephemeral}`,
then the other control items and the notice, so the blocks joined by the system separator are the
system text. OpenAI (`prompt_cache_key`): the key is a top-level field.

`openai_responses`, the Responses API: `instructions` is the system text; `input` holds the same
messages in the same positions as `openai_chat`, as items: user messages with `input_text` parts,
the agent's own text as assistant messages with `output_text` parts, each call a `function_call`
item and its result a `function_call_output` item with the same `call_id`, after the calls of its
turn; tools are `{type: function, name, description, parameters, strict: false}` (the API makes an
omitted `strict` true and rewrites the schema: every property required).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .render import EMPTY_USER, SYSTEM_SEPARATOR, needs_placeholder, split_transcript, system_text

CACHE_CONTROL = {"type": "ephemeral"}
RESPONSES_MIN_OUTPUT_TOKENS = 16  # the Responses API refuses a smaller max_output_tokens


@dataclass(frozen=True)
class Adapter:
    name: str
    version: str
    serialize: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]


def result_text(pair: dict[str, Any]) -> str:
    """A tool result's text: its fenced block (the header states a status that is not a plain
    success), or the synthetic result, which states its own."""
    return pair["result"]["text"]


def _user_content(texts: list[str]) -> str | list[dict[str, Any]]:
    """A user message's content: the caller's own string when the turn is one text, else text parts."""
    return texts[0] if len(texts) == 1 else [{"type": "text", "text": t} for t in texts]


def _openai_pairs(pairs: list[dict[str, Any]], content: str | None = None) -> list[dict[str, Any]]:
    calls = [{"id": p["call_id"], "type": "function", "function": {"name": p["tool_name"], "arguments": p["arguments_json"]}} for p in pairs]
    messages: list[dict[str, Any]] = [{"role": "assistant", "content": content, "tool_calls": calls}]
    messages += [{"role": "tool", "tool_call_id": p["call_id"], "content": result_text(p)} for p in pairs]
    return messages


def _openai_turn(turn: dict[str, Any]) -> list[dict[str, Any]]:
    """A user turn is a user message; an assistant turn its text (several blocks joined by a
    newline) with the calls it made, then their results."""
    texts = [b["text"] for b in turn["blocks"]]
    if turn["speaker"] == "user":
        return [{"role": "user", "content": _user_content(texts)}]
    if turn["tool_pairs"]:
        return _openai_pairs(turn["tool_pairs"], "\n".join(texts) if texts else None)
    return [{"role": "assistant", "content": "\n".join(texts)}]


def openai_chat(inp: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system_text(inp)}]
    if needs_placeholder(inp):
        messages.append({"role": "user", "content": EMPTY_USER})
    before, after = split_transcript(inp)
    for turn in before:
        messages += _openai_turn(turn)
    if inp["blocks"]:
        messages.append({"role": "user", "content": [{"type": "text", "text": b["text"]} for b in inp["blocks"]]})
    if inp["tool_pairs"]:
        messages += _openai_pairs(inp["tool_pairs"])
    for turn in after:
        messages += _openai_turn(turn)
    payload: dict[str, Any] = {"model": model["name"], "messages": messages}
    if inp["tools"]:
        payload["tools"] = [
            {"type": "function", "function": {"name": t["name"], "description": t["description"], "parameters": t["parameters"]}}
            for t in inp["tools"]
        ]
    payload.update(_caller_params(model, "openai_chat"))
    if model.get("prompt_cache_key"):
        payload["prompt_cache_key"] = model["prompt_cache_key"]
    return payload


def _caller_params(model: dict[str, Any], adapter: str) -> dict[str, Any]:
    """The caller's own request parameters (`model["params"]`), passed through unchanged, except
    the ones the adapter itself writes (model, messages, system, tools, input, instructions)."""
    return {k: v for k, v in (model.get("params") or {}).items() if k not in OWN_FIELDS[adapter]}


OWN_FIELDS = {
    "openai_chat": frozenset({"model", "messages", "tools"}),
    "anthropic_messages": frozenset({"model", "messages", "system", "tools", "max_tokens"}),
    "openai_responses": frozenset({"model", "input", "instructions", "tools", "max_output_tokens"}),
}


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


def _anthropic_turn(messages: list[dict[str, Any]], turn: dict[str, Any]) -> None:
    texts = [{"type": "text", "text": b["text"]} for b in turn["blocks"]]
    if turn["speaker"] == "user":
        _append(messages, "user", texts)
    else:
        _append(messages, "assistant", texts + _anthropic_calls(turn["tool_pairs"]))
        if turn["tool_pairs"]:
            _append(messages, "user", _anthropic_results(turn["tool_pairs"]))


def anthropic_messages(inp: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    if needs_placeholder(inp):
        _append(messages, "user", [{"type": "text", "text": EMPTY_USER}])
    before, after = split_transcript(inp)
    for turn in before:
        _anthropic_turn(messages, turn)
    if inp["blocks"]:
        _append(messages, "user", [{"type": "text", "text": b["text"]} for b in inp["blocks"]])
    if inp["tool_pairs"]:
        _append(messages, "assistant", _anthropic_calls(inp["tool_pairs"]))
        _append(messages, "user", _anthropic_results(inp["tool_pairs"]))
    for turn in after:
        _anthropic_turn(messages, turn)
    payload: dict[str, Any] = {
        "model": model["name"],
        "max_tokens": model["max_tokens"],
        "system": _anthropic_system(inp, model),
        "messages": messages,
    }
    if inp["tools"]:
        payload["tools"] = [{"type": t["type"], "name": t["name"]} if t.get("type") else
                            {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]} for t in inp["tools"]]
    payload.update(_caller_params(model, "anthropic_messages"))
    return payload


def _anthropic_system(inp: dict[str, Any], model: dict[str, Any]) -> str | list[dict[str, Any]]:
    """The system text, or, with a cache breakpoint, its stable prefix as a block marked to be
    cached (one breakpoint of the four Anthropic allows) followed by the rest."""
    control = inp["control"]
    n = len(control["stable_prefix_item_ids"])
    head = SYSTEM_SEPARATOR.join(control["text"][:n])
    if not model.get("cache_breakpoint") or not head.strip():
        return system_text(inp)
    tail = SYSTEM_SEPARATOR.join([*control["text"][n:], control["notice"]])
    return [{"type": "text", "text": head, "cache_control": dict(CACHE_CONTROL)}, {"type": "text", "text": tail}]


def _responses_message(role: str, texts: list[str]) -> dict[str, Any]:
    part = "input_text" if role == "user" else "output_text"
    return {"type": "message", "role": role, "content": [{"type": part, "text": t} for t in texts]}


def _responses_pairs(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    items = [{"type": "function_call", "call_id": p["call_id"], "name": p["tool_name"], "arguments": p["arguments_json"]} for p in pairs]
    items += [{"type": "function_call_output", "call_id": p["call_id"], "output": result_text(p)} for p in pairs]
    return items


def _responses_turn(turn: dict[str, Any]) -> list[dict[str, Any]]:
    texts = [b["text"] for b in turn["blocks"]]
    if turn["speaker"] == "user":
        return [_responses_message("user", texts)]
    items = [_responses_message("assistant", ["\n".join(texts)])] if texts else []  # the chat adapter's assistant content
    return items + _responses_pairs(turn["tool_pairs"])


def openai_responses(inp: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    if needs_placeholder(inp):
        items.append(_responses_message("user", [EMPTY_USER]))
    before, after = split_transcript(inp)
    for turn in before:
        items += _responses_turn(turn)
    if inp["blocks"]:
        items.append(_responses_message("user", [b["text"] for b in inp["blocks"]]))
    if inp["tool_pairs"]:
        items += _responses_pairs(inp["tool_pairs"])
    for turn in after:
        items += _responses_turn(turn)
    payload: dict[str, Any] = {"model": model["name"], "instructions": system_text(inp), "input": items}
    if inp["tools"]:
        payload["tools"] = [
            {"type": "function", "name": t["name"], "description": t["description"], "parameters": t["parameters"], "strict": False}
            for t in inp["tools"]
        ]
    if model.get("max_tokens", 0) >= RESPONSES_MIN_OUTPUT_TOKENS:
        payload["max_output_tokens"] = model["max_tokens"]
    payload.update(_caller_params(model, "openai_responses"))
    if model.get("prompt_cache_key"):
        payload["prompt_cache_key"] = model["prompt_cache_key"]
    return payload


ADAPTERS: dict[str, Adapter] = {
    "openai_chat": Adapter("openai_chat", "1.3.0", openai_chat),
    "anthropic_messages": Adapter("anthropic_messages", "1.3.0", anthropic_messages),
    "openai_responses": Adapter("openai_responses", "1.1.0", openai_responses),
}


def get_adapter(name: str) -> Adapter | None:
    return ADAPTERS.get(name)
