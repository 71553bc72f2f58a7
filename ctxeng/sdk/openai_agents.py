"""OpenAI Agents SDK: `context_filter` for `RunConfig(call_model_input_filter=...)`.

    result = await Runner.run(agent, task, run_config=RunConfig(call_model_input_filter=context_filter(session)))

Contract: the Agents SDK calls the filter just before each model call with the agent's
`instructions` and the run's input items (Responses-API items: messages, `function_call`,
`function_call_output`). The filter turns them into OpenAI chat messages (`to_chat_messages`:
the instructions as the system message first; a `function_call` joins the assistant message
before it, as one chat turn; an item's `id` is the dict's `"id"`, the item id ctxeng keeps stable
across steps, except the SDK's placeholder id and ids that more than one item carries), takes
`session.step(messages, tools=<the function tools the SDK offers at this call>)` (`offered_tools`:
the agent's `FunctionTool`s whose `is_enabled`, a bool or a callable of the run context and the
agent, is true, then its MCP servers' tools), and returns the assembled step as
`ModelInputData(input=<step.messages as Responses items>, instructions=step.system)`
(`to_responses_items`). The caller's own call ids are restored, so the SDK pairs results as it
always does. The SDK's response has no place for the assembly id: the session's `steps` list
every step, in order (`session.steps[-1].assembly_id`).

A blocked assembly is handled as `on_blocked` says:
- `"raise"` (default): `ctxeng.sdk.ContextBlocked` (with `.step`, `.manifest`, `.reason`) leaves
  `Runner.run`; the model is not called.
- `"passthrough"`: the model receives the SDK's input unchanged; the manifest records the attempt.
- a callable `(step, data: CallModelData) -> ModelInputData`: what it returns is sent.

What the filter cannot change: the SDK sends the agent's tool definitions itself, so the tools the
manifest lists are the function tools it offers, as given; hosted tools and handoffs are not
assembled (the SDK still sends them). `reasoning` items have no place in a chat payload and are left
out; any other item kind with no chat form (`computer_call`, `web_search_call`, `item_reference`,
...) and any part that is not text is refused with an `SDKError` naming it. A run that lets the
server keep the conversation (`conversation_id`, `previous_response_id`) sends only new items and
is not one this filter can assemble.

Needs `openai-agents` (`pip install '.[frameworks]' in a ctxeng checkout`), imported when the filter is made.
"""

from __future__ import annotations

import copy
import inspect
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Literal

from .errors import SDKError

__all__ = ["context_filter", "to_chat_messages", "to_responses_items"]

OnBlocked = Literal["raise", "passthrough"] | Callable[[Any, Any], Any]

# The id the SDK gives items of models that have none (agents.models.fake_id.FAKE_RESPONSES_ID).
_PLACEHOLDER_ID = "__fake_id__"
_TEXT_PARTS = ("input_text", "output_text", "text")


def context_filter(
    session: Any, *, items: Sequence[Any] = (), stage: str | None = None, on_blocked: OnBlocked = "raise"
) -> Callable[[Any], Any]:
    """A `call_model_input_filter` that assembles every model call of a run with `session`.

    `items` and `stage` are passed to every `session.step`; `on_blocked` is `"raise"` (the
    default), `"passthrough"` or a callable `(step, data) -> ModelInputData` (or an awaitable of one).
    The filter is a coroutine function (the SDK awaits it): an agent's `is_enabled` callables and
    its MCP servers' tool lists may be awaitables, and the assembly runs in a worker thread.
    """
    if on_blocked not in ("raise", "passthrough") and not callable(on_blocked):
        raise ValueError(f"on_blocked must be 'raise', 'passthrough' or a callable, not {on_blocked!r}")
    model_input_data = _model_input_data()
    items = tuple(items)

    async def assemble(data: Any) -> Any:
        messages = to_chat_messages(data.model_data.input, instructions=data.model_data.instructions)
        tools = await offered_tools(data.agent, data.context)
        step = await session.astep(messages, tools=tools or None, items=items, stage=stage, format="openai",
                                   **reply_params(data.agent))
        if step.status == "blocked" and on_blocked == "passthrough":
            return data.model_data
        if step.status == "blocked" and callable(on_blocked):
            answer = on_blocked(step, data)
            return await answer if inspect.isawaitable(answer) else answer
        assembled = step.messages  # raises ContextBlocked for a blocked step
        rest = assembled[1:] if assembled and assembled[0]["role"] == "system" else assembled
        return model_input_data(input=to_responses_items(rest), instructions=step.system)

    return assemble


def reply_params(agent: Any) -> dict[str, Any]:
    """The reply size the agent's model settings ask for (`ModelSettings.max_tokens`), so the
    budget reserves it; {} when they set none."""
    size = getattr(getattr(agent, "model_settings", None), "max_tokens", None)
    return {"max_tokens": size} if isinstance(size, int) and not isinstance(size, bool) and size > 0 else {}


def _model_input_data() -> type:
    try:
        from agents.run import ModelInputData
    except ImportError as exc:
        raise ImportError("ctxeng.sdk.openai_agents needs openai-agents: pip install '.[frameworks]' in a ctxeng checkout") from exc
    return ModelInputData


async def offered_tools(agent: Any, context: Any) -> list[dict[str, Any]]:
    """The function tools the SDK offers the model at this call, as OpenAI chat tool definitions: the
    agent's `FunctionTool`s whose `is_enabled` (a bool, or a callable of the run context and the
    agent, maybe async) is true, as `Agent.get_all_tools` decides it, then its MCP servers' tools.
    Hosted tools (web search, file search, code interpreter, ...) and handoffs are the SDK's to send."""
    from agents import FunctionTool, RunContextWrapper

    wrapper = RunContextWrapper(context=context)

    async def enabled(tool: FunctionTool) -> bool:
        flag = tool.is_enabled
        if isinstance(flag, bool):
            return flag
        answer = flag(wrapper, agent)
        return bool(await answer if inspect.isawaitable(answer) else answer)

    tools = [t for t in agent.tools if isinstance(t, FunctionTool) and await enabled(t)]
    if getattr(agent, "mcp_servers", None):
        tools += [t for t in await agent.get_mcp_tools(wrapper) if isinstance(t, FunctionTool)]
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description or "", "parameters": t.params_json_schema}}
        for t in tools
    ]


def to_chat_messages(items: str | Sequence[Any], *, instructions: str | None = None) -> list[dict[str, Any]]:
    """Responses-API input items (and the agent's instructions) as OpenAI chat messages."""
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    items = [_as_dict(item) for item in items]
    counts = Counter(item.get("id") for item in items)
    messages: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []
    for item in items:
        # An item with neither a type nor a role is the union's only untyped member, an item_reference.
        kind = item.get("type") or ("message" if "role" in item else "item_reference")
        if kind == "reasoning":
            continue
        if kind == "function_call":
            call = {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": item["arguments"]}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)  # the same model turn: its text, then its calls
                continue
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        elif kind == "function_call_output":
            message = {"role": "tool", "tool_call_id": item["call_id"], "content": _output_text(item["output"])}
        elif kind == "message":
            message = {"role": item["role"], "content": _chat_content(item["role"], item["content"])}
        else:
            raise SDKError(f"ctxeng.sdk.openai_agents: a {kind!r} item has no OpenAI chat form; the filter cannot assemble it")
        item_id = item.get("id")
        if isinstance(item_id, str) and item_id != _PLACEHOLDER_ID and counts[item_id] == 1:
            message["id"] = item_id
        messages.append(message)
    return messages


def _as_dict(item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        return item
    return item.model_dump(exclude_unset=True)  # a pydantic item of the openai package


def _texts(parts: Sequence[dict[str, Any]], where: str) -> list[str]:
    texts = []
    for part in parts:
        if part.get("type") in _TEXT_PARTS:
            texts.append(part["text"])
        elif part.get("type") == "refusal":
            texts.append(part["refusal"])
        else:
            raise SDKError(f"ctxeng.sdk.openai_agents: a {part.get('type')!r} part of {where} is not text; only text is assembled")
    return texts


def _chat_content(role: str, content: str | Sequence[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    texts = _texts(content, f"a {role} message")
    if role == "assistant":
        return "".join(texts)  # one output message's text, as the SDK reads it
    return [{"type": "text", "text": text} for text in texts]


def _output_text(output: str | Sequence[dict[str, Any]]) -> str:
    return output if isinstance(output, str) else "".join(_texts(output, "a function_call_output"))


def to_responses_items(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat messages (the system message already taken out) as Responses-API input items."""
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        content = copy.deepcopy(message.get("content"))
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": message["tool_call_id"], "output": _plain(content)})
            continue
        if role == "assistant":
            if content:
                items.append({"type": "message", "role": "assistant", "content": _plain(content)})
            items += [
                {"type": "function_call", "call_id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                for c in message.get("tool_calls") or []
            ]
            continue
        if isinstance(content, list):
            content = [{"type": "input_text", "text": part["text"]} for part in content]
        items.append({"type": "message", "role": role, "content": content})
    return items


def _plain(content: str | list[dict[str, Any]]) -> str:
    return content if isinstance(content, str) else "".join(part["text"] for part in content)
