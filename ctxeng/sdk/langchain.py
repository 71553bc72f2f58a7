"""LangChain v1: `ContextMiddleware` for `create_agent`, and the LangChain <-> OpenAI-chat messages.

    agent = create_agent(model, tools, middleware=[ContextMiddleware(session)])

Contract: the middleware wraps every model call of the agent (`wrap_model_call`, and
`awrap_model_call` for `ainvoke`/`astream`). It hands the request's system message, messages and
tools to `session.step(..., format="langchain")`, and the model receives the assembled step
instead: `step.messages` (the caller's own tool-call ids restored; the assembled system message as
the request's system message) bound to the tools the payload carries, in the payload's order. So the
model sees exactly the payload the sealed manifest hashes, up to the ids. The agent's state keeps
its whole history; only what the model sees changes.

Every AI message the call returns carries the step in `response_metadata["ctxeng"]`: `assembly_id`,
`run_id`, `step_id`, `status`, `blocked_reason`, `serialized_model_input_hash`, `manifest_digest`
(sha256 of the sealed manifest document's canonical JSON) and `manifest_url` (the dashboard page
of the manifest for a remote session, else None).

A blocked assembly is handled as `on_blocked` says:
- `"raise"` (default): `ctxeng.sdk.ContextBlocked` (with `.step`, `.manifest`, `.reason`) leaves
  the agent's `invoke`; the model is not called.
- `"passthrough"`: the model receives the request unchanged, as if there were no middleware; the
  manifest still records the blocked attempt and the response's metadata says `blocked`.
- a callable `(step, request) -> ModelResponse | AIMessage` (or an awaitable of one, under
  `ainvoke`): its answer stands in for the model's (e.g. an `AIMessage` telling the user what is
  missing); the model is not called.

Provider built-in tools (dicts whose `type` is not `function`: `{"type": "web_search"}`, Anthropic's
`web_search_20250305`, ...) are not assembled and pass through to the model as the agent gave them,
after the function tools; a dict without a `type` is a function's schema and is assembled. A call an
AI message lists both in `tool_calls` and among its content blocks is carried once, by `tool_calls`;
any other content block that is not text is refused by the session, naming it.

`to_openai_messages` / `from_openai_messages` are the conversion `Session.step` uses for
`format="langchain"`: system (and `developer`, LangChain's `__openai_role__`), human, AI with
tool calls, tool messages; a message's `.id` is the dict's `"id"` (the item id ctxeng keeps stable
across steps); content strings and lists of parts are kept as they are.

`langchain-core` is needed for the conversions, `langchain` (1.1 or later) for the middleware: both
come with `pip install '.[frameworks]' in a ctxeng checkout`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import json
from collections.abc import Callable, Sequence
from typing import Any, Literal

from ctxeng.engine.hashing import sha256_json

try:
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        ChatMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
    )
except ImportError as exc:
    raise ImportError("ctxeng.sdk.langchain needs langchain-core: pip install '.[frameworks]' in a ctxeng checkout") from exc

# ContextMiddleware is built on first access (module __getattr__, below).
__all__ = ["ContextMiddleware", "from_openai_messages", "to_openai_messages"]  # noqa: F822

OnBlocked = Literal["raise", "passthrough"] | Callable[[Any, Any], Any]

# LangChain marks a system message that OpenAI should receive as `developer` this way.
_OPENAI_ROLE = "__openai_role__"


def to_openai_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages as OpenAI chat dicts (a message's `.id`, when set, as `"id"`)."""
    return [_to_openai(message) for message in messages]


def _to_openai(message: BaseMessage) -> dict[str, Any]:
    content = copy.deepcopy(message.content)
    if isinstance(message, SystemMessage):
        out: dict[str, Any] = {"role": message.additional_kwargs.get(_OPENAI_ROLE, "system"), "content": content}
    elif isinstance(message, HumanMessage):
        out = {"role": "user", "content": content}
    elif isinstance(message, AIMessage):
        calls = [_openai_call(c["id"], c["name"], json.dumps(c["args"], ensure_ascii=False)) for c in message.tool_calls]
        # Arguments the provider sent that did not parse stay as sent; the session decides.
        calls += [_openai_call(c["id"], c["name"] or "", c["args"] or "") for c in message.invalid_tool_calls]
        if isinstance(content, list):
            # A provider that lists each call among the content blocks too (Anthropic's `tool_use`,
            # the standard `tool_call`, the Responses API's `function_call`) has it in `tool_calls`:
            # the call is carried there, once. Any other block stays, and the session refuses what
            # is not text by name.
            call_ids = {c["id"] for c in calls}
            content = [b for b in content if not _is_listed_call(b, call_ids)]
        out = {"role": "assistant", "content": content}
        if calls:
            out["content"] = content or None
            out["tool_calls"] = calls
    elif isinstance(message, ToolMessage):
        out = {"role": "tool", "tool_call_id": message.tool_call_id, "content": content}
        if message.status == "error":
            out["status"] = "error"  # the session records the result's status from this
    elif isinstance(message, ChatMessage):
        out = {"role": message.role, "content": content}
    else:
        raise ValueError(f"ctxeng.sdk.langchain: cannot convert a {type(message).__name__} to an OpenAI chat message")
    if message.id is not None:
        out["id"] = message.id
    return out


# The content blocks in which providers repeat a tool call that `tool_calls` already holds.
_CALL_BLOCKS = ("tool_use", "tool_call", "function_call", "invalid_tool_call")


def _is_listed_call(block: Any, call_ids: set[str]) -> bool:
    if not isinstance(block, dict) or block.get("type") not in _CALL_BLOCKS:
        return False
    return block.get("id") in call_ids or block.get("call_id") in call_ids


def _openai_call(call_id: str | None, name: str, arguments: str) -> dict[str, Any]:
    if not call_id:
        raise ValueError(f"ctxeng.sdk.langchain: the tool call {name!r} has no id; a call is paired with its result by id")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def from_openai_messages(messages: Sequence[dict[str, Any]]) -> list[BaseMessage]:
    """OpenAI chat dicts as LangChain messages (a dict's `"id"` as the message's `.id`)."""
    return [_from_openai(message) for message in messages]


def _from_openai(message: dict[str, Any]) -> BaseMessage:
    role = message["role"]
    content = copy.deepcopy(message.get("content"))
    ids = {"id": message["id"]} if message.get("id") is not None else {}
    if role == "system":
        return SystemMessage(content=content, **ids)
    if role == "developer":
        return SystemMessage(content=content, additional_kwargs={_OPENAI_ROLE: "developer"}, **ids)
    if role == "user":
        return HumanMessage(content=content, **ids)
    if role == "assistant":
        tool_calls, invalid = [], []
        for call in message.get("tool_calls") or []:
            name, arguments = call["function"]["name"], call["function"]["arguments"]
            try:
                args = json.loads(arguments)
            except ValueError:
                args = None
            if isinstance(args, dict):
                tool_calls.append({"type": "tool_call", "id": call["id"], "name": name, "args": args})
            else:
                invalid.append({"type": "invalid_tool_call", "id": call["id"], "name": name, "args": arguments, "error": None})
        return AIMessage(content=content or "", tool_calls=tool_calls, invalid_tool_calls=invalid, **ids)
    if role == "tool":
        status = "error" if message.get("status") == "error" else "success"
        return ToolMessage(content=content, tool_call_id=message["tool_call_id"], status=status, **ids)
    raise ValueError(f"ctxeng.sdk.langchain: unknown OpenAI chat role {role!r}")


def step_metadata(step: Any) -> dict[str, Any]:
    """What `response_metadata["ctxeng"]` holds: the step's identity, enough to fetch its manifest."""
    header = step.manifest["assembly"]
    return {
        "assembly_id": step.assembly_id,
        "run_id": header["run_id"],
        "step_id": header["step_id"],
        "status": step.status,
        "blocked_reason": step.blocked_reason,
        "serialized_model_input_hash": header.get("serialized_model_input_hash"),
        "manifest_digest": sha256_json(step.sealed_manifest),
        "manifest_url": step.dashboard_url,
    }


def __getattr__(name: str) -> Any:
    # The middleware subclasses langchain's AgentMiddleware: it is built on first use, so the
    # message conversions work with langchain-core alone.
    if name == "ContextMiddleware":
        return _middleware_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _middleware_class() -> type:
    needs = "ctxeng.sdk.langchain.ContextMiddleware needs langchain>=1.1: pip install '.[frameworks]' in a ctxeng checkout"
    try:
        from langchain.agents import middleware
        from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
        from langchain_core.utils.function_calling import convert_to_openai_tool
    except ImportError as exc:
        raise ImportError(needs) from exc
    if "system_message" not in ModelRequest.__dataclass_fields__:  # 1.0 has only the system prompt's text
        raise ImportError(needs)

    # A response with a state update beside it: newer releases have it, 1.1 has none.
    extended = getattr(middleware, "ExtendedModelResponse", ())

    def is_function_tool(tool: Any) -> bool:
        # A dict with a type other than "function" is a provider built-in ({"type": "web_search"}),
        # as LangChain's provider integrations read it; a dict without one is a schema of a function
        # (Anthropic's {name, input_schema}, a JSON schema), which convert_to_openai_tool reads.
        return not isinstance(tool, dict) or tool.get("type", "function") == "function"

    def tool_name(tool: Any) -> str:
        converted = convert_to_openai_tool(tool)
        return converted.get("function", converted)["name"]  # the Responses API's function tools are flat

    def stamped(result: Any, step: Any) -> Any:
        """The handler's (or on_blocked's) answer with the step in each AI message's metadata."""
        if isinstance(result, AIMessage):
            result = ModelResponse(result=[result])
        if isinstance(result, extended):
            return dataclasses.replace(result, model_response=stamped(result.model_response, step))
        meta = step_metadata(step)
        reported = [m for m in result.result if isinstance(m, AIMessage) and m.usage_metadata]
        if reported and step.status == "ready":  # the provider's count beside the estimate (calibration)
            step.report_usage(reported[-1])
        messages = [
            m.model_copy(update={"response_metadata": {**m.response_metadata, "ctxeng": meta}}) if isinstance(m, AIMessage) else m
            for m in result.result
        ]
        return dataclasses.replace(result, result=messages)

    class ContextMiddleware(AgentMiddleware):
        """Assemble every model call of a LangChain agent with a ctxeng session (see the module).

        `items` and `stage` are passed to every `session.step`; `on_blocked` is `"raise"` (the
        default), `"passthrough"` or a callable `(step, request) -> ModelResponse | AIMessage`
        (under `ainvoke` it may return an awaitable of one).
        """

        def __init__(self, session: Any, *, items: Sequence[Any] = (), stage: str | None = None, on_blocked: OnBlocked = "raise") -> None:
            super().__init__()
            if on_blocked not in ("raise", "passthrough") and not callable(on_blocked):
                raise ValueError(f"on_blocked must be 'raise', 'passthrough' or a callable, not {on_blocked!r}")
            self.session = session
            self.items = tuple(items)
            self.stage = stage
            self.on_blocked = on_blocked

        def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            step = self._step(request)
            if step.status == "blocked" and self.on_blocked != "raise":
                answer = handler(request) if self.on_blocked == "passthrough" else self.on_blocked(step, request)
                return stamped(answer, step)
            return stamped(handler(self._assembled(request, step)), step)

        async def awrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            step = await self._astep(request)
            if step.status == "blocked" and self.on_blocked != "raise":
                answer = handler(request) if self.on_blocked == "passthrough" else self.on_blocked(step, request)
                return stamped(await answer if inspect.isawaitable(answer) else answer, step)
            return stamped(await handler(self._assembled(request, step)), step)

        def _step_arguments(self, request: Any) -> tuple[list[Any], dict[str, Any]]:
            messages = [request.system_message, *request.messages] if request.system_message else list(request.messages)
            tools = [convert_to_openai_tool(t) for t in request.tools if is_function_tool(t)]
            return messages, {"tools": tools or None, "items": self.items, "stage": self.stage, "format": "langchain",
                              **reply_params(request)}

        def _step(self, request: Any) -> Any:
            messages, kwargs = self._step_arguments(request)
            return self.session.step(messages, **kwargs)

        async def _astep(self, request: Any) -> Any:
            messages, kwargs = self._step_arguments(request)
            return await self.session.astep(messages, **kwargs)

        def _assembled(self, request: Any, step: Any) -> Any:
            """The request the model receives: the step's messages and the payload's tools. Reading
            `step.messages` raises ContextBlocked for a blocked step."""
            system, *messages = step.messages
            offered = {tool_name(t): t for t in request.tools if is_function_tool(t)}
            # The agent's own tool objects where the payload names one (the provider integration
            # converts them as it always does); a definition only the payload has, as the payload has it.
            tools = [offered.get(t["function"]["name"], t) for t in step.payload.get("tools", [])]
            tools += [t for t in request.tools if not is_function_tool(t)]
            return request.override(system_message=system, messages=messages, tools=tools)

    ContextMiddleware.__module__ = __name__
    return ContextMiddleware


def reply_params(request: Any) -> dict[str, Any]:
    """The reply size the model call will ask for (`max_tokens` of the request's model settings, else
    of the chat model), so the budget reserves it; {} when neither sets one."""
    settings = getattr(request, "model_settings", None) or {}
    size = settings.get("max_tokens", getattr(getattr(request, "model", None), "max_tokens", None))
    return {"max_tokens": size} if isinstance(size, int) and not isinstance(size, bool) and size > 0 else {}
