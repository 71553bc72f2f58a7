"""ctxeng.sdk.openai_agents: everything an OpenAI Agents SDK run can hand the filter, kind by kind.

`CallModelData` (agents.run_config) carries the agent (its `tools`: `FunctionTool`s whose
`is_enabled` is a bool or a callable of the run context and the agent, maybe async, hosted tools,
MCP servers; its `handoffs`; its `ModelSettings`), the run's context and the model input: the
instructions and the input items, any member of the Responses API's `ResponseInputItemParam`
union. Each table states from the SDK's own contract what must come out: the manifest lists
exactly the function tools the SDK offers the model at that call (its own `is_enabled` decision),
hosted tools and handoffs still reach the model as the SDK sends them, the reply size is reserved,
and every item kind is converted, left out as documented (`reasoning`) or refused by name.
"""

from __future__ import annotations

import asyncio
import types
import typing
from typing import Any

import pytest
from agents import (
    Agent,
    CodeInterpreterTool,
    FileSearchTool,
    FunctionTool,
    HostedMCPTool,
    ImageGenerationTool,
    Model,
    ModelResponse,
    ModelSettings,
    RunConfig,
    Runner,
    Usage,
    WebSearchTool,
    function_tool,
    set_tracing_disabled,
)
from agents.mcp import MCPServer
from mcp.types import Tool as MCPTool
from openai.types.responses import ResponseOutputMessage, ResponseOutputText
from openai.types.responses.response_input_content_param import ResponseInputContentParam
from openai.types.responses.response_input_item_param import ResponseInputItemParam

from ctxeng import sdk
from ctxeng.sdk.openai_agents import context_filter, to_chat_messages

TASK = "Which release dropped Python 3.9?"
ANSWER = "Release 2.1."


@pytest.fixture(autouse=True)
def _no_trace_export():
    """The Agents SDK exports traces to OpenAI by default; there is no network here."""
    set_tracing_disabled(True)
    yield
    set_tracing_disabled(False)


class RecordingModel(Model):
    """Answers `ANSWER`; `calls` holds what each call received, as the SDK passed it."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs, tracing, **kwargs):
        self.calls.append({"instructions": system_instructions, "input": input, "tools": list(tools),
                           "handoffs": list(handoffs), "settings": model_settings})
        answer = ResponseOutputMessage(id="msg_1", type="message", role="assistant", status="completed",
                                       content=[ResponseOutputText(type="output_text", text=ANSWER, annotations=[])])
        return ModelResponse(output=[answer], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the tests run the agent without streaming")


def run(agent: Agent, *, context: Any = None, task: Any = TASK) -> tuple[RecordingModel, sdk.Session]:
    session = sdk.Session("chat-agent", model="gpt-4o")
    Runner.run_sync(agent, task, context=context, run_config=RunConfig(call_model_input_filter=context_filter(session)))
    return agent.model, session  # type: ignore[return-value]


def listed(session: sdk.Session) -> list[str]:
    return sorted(t["function"]["name"] for t in session.steps[-1].payload.get("tools", []))


def offered_functions(call: dict[str, Any]) -> list[str]:
    """The function tools the SDK itself offered the model at this call (its own decision)."""
    return sorted(t.name for t in call["tools"] if isinstance(t, FunctionTool))


def tool(name: str, is_enabled: Any = True) -> FunctionTool:
    def answer(query: str) -> str:
        return "Release 2.1 drops Python 3.9."

    answer.__name__ = name
    answer.__doc__ = f"{name} the release notes."
    return function_tool(answer, is_enabled=is_enabled)


def admins_only(ctx, agent) -> bool:
    return bool(ctx.context and ctx.context.get("admin"))


async def admins_only_async(ctx, agent) -> bool:
    await asyncio.sleep(0)
    return bool(ctx.context and ctx.context.get("admin"))


# --------------------------------------------------------------------------- tools

# (kind, the agent's tools, the run's context, the function tools the SDK offers, by hand)
TOOLS = [
    ("enabled", [tool("search")], None, ["search"]),
    ("is_enabled=False", [tool("search"), tool("delete_all", is_enabled=False)], None, ["search"]),
    ("is_enabled=True", [tool("search", is_enabled=True)], None, ["search"]),
    ("callable, false for this context", [tool("search"), tool("admin_report", admins_only)], {"admin": False}, ["search"]),
    ("callable, true for this context", [tool("search"), tool("admin_report", admins_only)], {"admin": True}, ["admin_report", "search"]),
    ("async callable, false", [tool("search"), tool("admin_report", admins_only_async)], {"admin": False}, ["search"]),
    ("async callable, true", [tool("search"), tool("admin_report", admins_only_async)], {"admin": True}, ["admin_report", "search"]),
    ("every tool disabled", [tool("search", is_enabled=False)], None, []),
]


@pytest.mark.parametrize("kind, tools, context, expected", TOOLS, ids=[t[0] for t in TOOLS])
def test_the_manifest_lists_exactly_the_function_tools_the_sdk_offers_the_model(kind, tools, context, expected):
    model, session = run(Agent(name="releases", instructions="Answer.", model=RecordingModel(), tools=tools), context=context)
    assert session.steps[-1].status == "ready"
    assert offered_functions(model.calls[-1]) == expected  # the SDK's own is_enabled decision, as written by hand
    assert listed(session) == expected


HOSTED = [
    WebSearchTool(),
    FileSearchTool(vector_store_ids=["vs_1"]),
    CodeInterpreterTool(tool_config={"type": "code_interpreter", "container": {"type": "auto"}}),
    HostedMCPTool(tool_config={"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example.com", "require_approval": "never"}),
    ImageGenerationTool(tool_config={"type": "image_generation"}),
]


@pytest.mark.parametrize("hosted", HOSTED, ids=[type(h).__name__ for h in HOSTED])
def test_a_hosted_tool_still_reaches_the_model_and_is_not_listed_as_a_function(hosted):
    model, session = run(Agent(name="releases", instructions="Answer.", model=RecordingModel(), tools=[tool("search"), hosted]))
    assert any(t is hosted for t in model.calls[-1]["tools"])
    assert listed(session) == ["search"]


def test_a_handoff_still_reaches_the_model_and_is_not_listed_as_a_function():
    billing = Agent(name="billing", instructions="Bill.", model=RecordingModel())
    model, session = run(Agent(name="releases", instructions="Answer.", model=RecordingModel(), tools=[tool("search")], handoffs=[billing]))
    assert [h.agent_name for h in model.calls[-1]["handoffs"]] == ["billing"]
    assert listed(session) == ["search"]


class ListedServer(MCPServer):
    """An MCP server that lists one tool (nothing is called: the model only answers)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def name(self) -> str:
        return "docs"

    async def connect(self) -> None:
        return None

    async def cleanup(self) -> None:
        return None

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> list[MCPTool]:
        return [MCPTool(name="read_doc", description="Read a document.", inputSchema={"type": "object", "properties": {"path": {"type": "string"}}})]

    async def call_tool(self, tool_name: str, arguments: Any, meta: Any = None) -> Any:
        raise AssertionError("the model calls no tool here")

    async def list_prompts(self) -> Any:
        raise AssertionError("no prompts")

    async def get_prompt(self, name: str, arguments: Any = None) -> Any:
        raise AssertionError("no prompts")


def test_an_mcp_servers_tools_are_listed_as_the_sdk_offers_them():
    model, session = run(Agent(name="releases", instructions="Answer.", model=RecordingModel(), tools=[tool("search")],
                               mcp_servers=[ListedServer()]))
    assert offered_functions(model.calls[-1]) == ["read_doc", "search"]
    assert listed(session) == ["read_doc", "search"]


# --------------------------------------------------------------------------- settings


def test_the_agents_max_tokens_is_reserved_and_its_other_settings_reach_the_model_unchanged():
    settings = ModelSettings(max_tokens=12_000, temperature=0.2, tool_choice="search", parallel_tool_calls=False)
    model, session = run(Agent(name="releases", instructions="Answer.", model=RecordingModel(), tools=[tool("search")], model_settings=settings))
    sent = model.calls[-1]["settings"]
    assert (sent.max_tokens, sent.temperature, sent.tool_choice, sent.parallel_tool_calls) == (12_000, 0.2, "search", False)
    assert session.steps[-1].manifest["budget"]["response_reserve"] == 12_000


# --------------------------------------------------------------------------- input items


def literal_types(member: Any) -> list[str]:
    hint = typing.get_type_hints(member)["type"]
    while typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return list(typing.get_args(hint))


def union_kinds(union: Any) -> set[str]:
    return {kind for member in typing.get_args(union) for kind in literal_types(member)}


CONVERTED = {"message", "function_call", "function_call_output"}
LEFT_OUT = {"reasoning"}  # the model's reasoning has no place in a chat payload (docs/frameworks.md)


def test_the_item_table_covers_every_input_item_kind_of_the_responses_api():
    refused = union_kinds(ResponseInputItemParam) - CONVERTED - LEFT_OUT
    assert CONVERTED | LEFT_OUT <= union_kinds(ResponseInputItemParam)
    assert {"computer_call", "web_search_call", "file_search_call", "item_reference", "mcp_call"} <= refused


@pytest.mark.parametrize("kind", sorted(union_kinds(ResponseInputItemParam) - CONVERTED - LEFT_OUT))
def test_an_item_with_no_chat_form_is_refused_naming_its_kind(kind):
    items = [{"role": "user", "content": TASK}, {"type": kind, "id": f"{kind}_1", "call_id": "call_1", "status": "completed"}]
    with pytest.raises(sdk.SDKError, match=rf"a '{kind}' item has no OpenAI chat form"):
        to_chat_messages(items)


def test_an_item_reference_without_its_optional_type_is_refused_by_name():
    with pytest.raises(sdk.SDKError, match=r"a 'item_reference' item has no OpenAI chat form"):
        to_chat_messages([{"role": "user", "content": TASK}, {"id": "msg_0"}])


def test_a_reasoning_item_is_left_out_and_the_turns_around_it_are_kept():
    items = [{"role": "user", "content": TASK}, {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}]},
             {"type": "function_call", "call_id": "c1", "name": "search", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c1", "output": "found"}]
    assert to_chat_messages(items) == [
        {"role": "user", "content": TASK},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "found"},
    ]


# (kind, the message item, the chat message it must become)
MESSAGES = [
    ("easy user string", {"role": "user", "content": TASK}, {"role": "user", "content": TASK}),
    ("easy user typed", {"type": "message", "role": "user", "content": TASK}, {"role": "user", "content": TASK}),
    ("user input_text parts", {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
     {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
    ("system", {"role": "system", "content": "Answer in English."}, {"role": "system", "content": "Answer in English."}),
    ("developer", {"role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
     {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]}),
    ("easy assistant string", {"role": "assistant", "content": "It was 2.1."}, {"role": "assistant", "content": "It was 2.1."}),
    ("output message", {"type": "message", "role": "assistant", "id": "msg_7", "status": "completed",
                        "content": [{"type": "output_text", "text": "It was ", "annotations": []}, {"type": "output_text", "text": "2.1.", "annotations": []}]},
     {"role": "assistant", "content": "It was 2.1.", "id": "msg_7"}),
    ("output refusal", {"type": "message", "role": "assistant", "id": "msg_8", "status": "completed",
                        "content": [{"type": "refusal", "refusal": "I cannot help."}]}, {"role": "assistant", "content": "I cannot help.", "id": "msg_8"}),
]


@pytest.mark.parametrize("kind, item, expected", MESSAGES, ids=[m[0] for m in MESSAGES])
def test_each_message_item_becomes_its_chat_message(kind, item, expected):
    assert to_chat_messages([item]) == [expected]


TEXT_PARTS = {"input_text"}


@pytest.mark.parametrize("kind", sorted(union_kinds(ResponseInputContentParam) - TEXT_PARTS))
@pytest.mark.parametrize("where", ["user", "function_call_output"])
def test_a_content_part_that_is_not_text_is_refused_naming_it(kind, where):
    part = {"type": kind, "image_url": "https://example.com/a.png", "file_id": "file_1", "detail": "auto"}
    if where == "user":
        items = [{"role": "user", "content": [{"type": "input_text", "text": TASK}, part]}]
    else:
        items = [{"role": "user", "content": TASK}, {"type": "function_call", "call_id": "c1", "name": "search", "arguments": "{}"},
                 {"type": "function_call_output", "call_id": "c1", "output": [part]}]
    with pytest.raises(sdk.SDKError, match=rf"a '{kind}' part of a .* is not text"):
        to_chat_messages(items)


def test_a_refused_item_leaves_the_run_naming_it_and_the_model_is_not_called():
    agent = Agent(name="releases", instructions="Answer.", model=RecordingModel(), tools=[tool("search")])
    task = [{"role": "user", "content": TASK},
            {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "python 3.9"}}]
    with pytest.raises(sdk.SDKError, match=r"a 'web_search_call' item has no OpenAI chat form"):
        run(agent, task=task)
    assert agent.model.calls == []


def test_every_item_kind_the_filter_converts_reaches_the_model_with_the_callers_ids():
    task = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": TASK}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "Searching.", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call.1/odd", "name": "search", "arguments": '{"query": "3.9"}'},
        {"type": "function_call_output", "call_id": "call.1/odd", "output": "Release 2.1 drops Python 3.9."},
        {"role": "user", "content": "And then?"},
    ]
    agent = Agent(name="releases", instructions="Answer.", model=RecordingModel(), tools=[tool("search")])
    model, session = run(agent, task=task)
    sent = model.calls[-1]
    assert "Be brief." in sent["instructions"] and "Answer." in sent["instructions"]
    kinds = [(i.get("type", "message"), i.get("role"), i.get("call_id")) for i in sent["input"]]
    assert kinds == [("message", "user", None), ("message", "assistant", None), ("function_call", None, "call.1/odd"),
                     ("function_call_output", None, "call.1/odd"), ("message", "user", None)]
    assert [(p["call_id"], p["status"]) for p in session.steps[-1].manifest["tool_pairs"]] == [("call.1/odd", "success")]
