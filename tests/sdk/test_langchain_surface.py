"""ctxeng.sdk.langchain: everything a LangChain v1 agent can hand the middleware, kind by kind.

A `ModelRequest` (langchain.agents.middleware.types) carries `tools` (BaseTool objects and dicts:
function schemas in OpenAI, Responses or Anthropic spelling, and provider built-ins such as
`{"type": "web_search"}`), `messages` (every `BaseMessage` class of langchain_core, with content
strings or lists of the standard content blocks), a `system_message`, `tool_choice` and
`model_settings`. Each table below passes one kind through a real `create_agent` with the
middleware and a recording chat model, and states from LangChain's and the providers' contracts
what must come out: function tools assembled and listed in the manifest, built-ins reaching the
model unchanged and unlisted, text kept in its role, tool pairs kept with their status, settings
carried to the model, and every kind the engine cannot assemble refused with an error that names
it (never dropped without a word).
"""

from __future__ import annotations

import copy
import typing
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import wrap_model_call
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages import content as blocks
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from pydantic import Field

from ctxeng import sdk
from ctxeng.engine.hashing import sha256_json
from ctxeng.sdk.langchain import ContextMiddleware, to_openai_messages

QUESTION = "Which release dropped Python 3.9?"
ANSWER = "Release 2.1."
SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}


class RecordingChatModel(BaseChatModel):
    """Answers `ANSWER`; `bound` holds what each `bind_tools`/`bind` received (the tools exactly as
    given, and the keyword settings), `calls` the messages of each call."""

    bound: list[dict[str, Any]] = Field(default_factory=list)
    calls: list[list[Any]] = Field(default_factory=list)
    max_tokens: int | None = None

    @property
    def _llm_type(self) -> str:
        return "recording"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        self.bound.append({"tools": list(tools), **kwargs})
        return self.bind(**{k: v for k, v in kwargs.items() if k != "tool_choice"})

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.calls.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=ANSWER))])


@tool
def search(query: str) -> str:
    """Search the release notes."""
    return "Release 2.1 drops Python 3.9."


def run(history: list[Any], tools: list[Any], *, middleware: tuple[Any, ...] = (), model: RecordingChatModel | None = None):
    model = model or RecordingChatModel()
    session = sdk.Session("chat-agent", model="gpt-4o")
    agent = create_agent(model, tools, middleware=[*middleware, ContextMiddleware(session)])
    agent.invoke({"messages": history})
    return model, session


def payload_tool_names(step: Any) -> list[str]:
    return [t["function"]["name"] for t in step.payload.get("tools", [])]


# --------------------------------------------------------------------------- tools

# (kind, the tool as the agent gives it, is it a function the engine assembles, its name)
TOOLS = [
    ("BaseTool", search, True, "search"),
    ("OpenAI chat function dict", {"type": "function", "function": {"name": "lookup", "description": "Look up.", "parameters": SCHEMA}}, True, "lookup"),
    ("Responses function dict", {"type": "function", "name": "lookup", "description": "Look up.", "parameters": SCHEMA}, True, "lookup"),
    ("Anthropic client tool dict", {"name": "lookup", "description": "Look up.", "input_schema": SCHEMA}, True, "lookup"),
    ("OpenAI web_search", {"type": "web_search"}, False, None),
    ("OpenAI code_interpreter", {"type": "code_interpreter", "container": {"type": "auto"}}, False, None),
    ("OpenAI file_search", {"type": "file_search", "vector_store_ids": ["vs_1"]}, False, None),
    ("OpenAI image_generation", {"type": "image_generation"}, False, None),
    ("OpenAI remote MCP", {"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example.com", "require_approval": "never"}, False, None),
    ("Anthropic web_search", {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}, False, None),
    ("Anthropic code_execution", {"type": "code_execution_20250522", "name": "code_execution"}, False, None),
]


@pytest.mark.parametrize("kind, given, is_function, name", TOOLS, ids=[t[0] for t in TOOLS])
def test_each_kind_of_tool_is_assembled_if_a_function_and_reaches_the_model_as_given_if_a_built_in(kind, given, is_function, name):
    original = copy.deepcopy(given) if isinstance(given, dict) else None
    model, session = run([HumanMessage(QUESTION)], [given] if given is search else [search, given])
    step, bound = session.steps[-1], model.bound[-1]["tools"]
    assert step.status == "ready"
    listed = payload_tool_names(step)
    if is_function:
        assert name in listed
        assert any(t is given for t in bound)  # the agent's own object: the integration converts it as always
    else:
        # A built-in runs on the provider's side: not a function definition in the manifest, and
        # the model is offered it exactly as the agent gave it.
        assert listed == ["search"]
        assert [t for t in bound if isinstance(t, dict) and t.get("type") == given["type"]] == [original]
        assert any(t is given for t in bound)
    assert len(bound) == (1 if given is search else 2)


def test_built_ins_keep_their_place_after_the_assembled_functions_and_none_is_lost():
    built_ins = [t[1] for t in TOOLS if not t[2]]
    model, session = run([HumanMessage(QUESTION)], [*built_ins, search])
    bound = model.bound[-1]["tools"]
    assert bound[0] is search and bound[1:] == built_ins
    assert payload_tool_names(session.steps[-1]) == ["search"]


def test_function_tools_in_the_chat_and_the_responses_spelling_reach_the_model_as_the_agents_own_objects():
    # convert_to_openai_tool nests a BaseTool's or a chat-completions dict's name under "function"
    # and leaves a Responses API dict flat: the middleware reads each name where it is, and hands
    # the model the agent's own object for every function the payload lists.
    chat = {"type": "function", "function": {"name": "lookup", "description": "Look up.", "parameters": SCHEMA}}
    responses = {"type": "function", "name": "find", "description": "Find.", "parameters": SCHEMA}
    model, session = run([HumanMessage(QUESTION)], [search, chat, responses])
    assert sorted(payload_tool_names(session.steps[-1])) == ["find", "lookup", "search"]
    bound = model.bound[-1]["tools"]
    assert len(bound) == 3 and all(any(b is given for b in bound) for given in (search, chat, responses))


# --------------------------------------------------------------------------- settings


def test_the_requests_settings_and_tool_choice_reach_the_model_and_max_tokens_is_reserved():
    @wrap_model_call
    def configure(request, handler):
        return handler(request.override(model_settings={"max_tokens": 12_000, "temperature": 0.1}, tool_choice="search"))

    model, session = run([HumanMessage(QUESTION)], [search], middleware=(configure,))
    assert {k: v for k, v in model.bound[-1].items() if k != "tools"} == {"tool_choice": "search", "max_tokens": 12_000, "temperature": 0.1}
    assert session.steps[-1].manifest["budget"]["response_reserve"] == 12_000


def test_the_chat_models_own_max_tokens_is_reserved_when_the_request_sets_none():
    model, session = run([HumanMessage(QUESTION)], [search], model=RecordingChatModel(max_tokens=10_000))
    assert session.steps[-1].manifest["budget"]["response_reserve"] == 10_000


def test_the_models_answer_carries_the_ready_step_that_assembled_its_input():
    session = sdk.Session("chat-agent", model="gpt-4o")
    agent = create_agent(RecordingChatModel(), [search], middleware=[ContextMiddleware(session)])
    answer = agent.invoke({"messages": [HumanMessage(QUESTION)]})["messages"][-1]
    step = session.steps[-1]
    header = step.manifest["assembly"]
    assert step.status == "ready" and isinstance(answer, AIMessage) and answer.text == ANSWER
    assert answer.response_metadata["ctxeng"] == {
        "assembly_id": step.assembly_id, "run_id": header["run_id"], "step_id": header["step_id"], "status": "ready",
        "blocked_reason": None, "serialized_model_input_hash": header["serialized_model_input_hash"],
        "manifest_digest": sha256_json(step.manifest), "manifest_url": None,
    }


def test_a_model_with_no_tools_is_bound_with_its_settings_only():
    @wrap_model_call
    def configure(request, handler):
        return handler(request.override(model_settings={"temperature": 0.3}))

    model, session = run([HumanMessage(QUESTION)], [], middleware=(configure,))
    assert model.bound == [] and payload_tool_names(session.steps[-1]) == []
    assert model.calls[-1][-1].content == QUESTION


# --------------------------------------------------------------------------- messages

CALL = {"name": "search", "args": {"query": "3.9"}, "id": "call_1"}


def turn(*messages: Any) -> list[Any]:
    """A history: the messages under test, then the user's next question (what the model answers)."""
    return [*messages, HumanMessage("And then?")]


# (kind, the history, what the model must receive: (class, text) pairs that must all be present)
ACCEPTED = [
    ("SystemMessage", turn(SystemMessage("Answer in English."), HumanMessage(QUESTION)), [(SystemMessage, "Answer in English.")]),
    ("developer SystemMessage", turn(SystemMessage("Be brief.", additional_kwargs={"__openai_role__": "developer"}), HumanMessage(QUESTION)),
     [(SystemMessage, "Be brief.")]),
    ("SystemMessage of text blocks", turn(SystemMessage([{"type": "text", "text": "Cite sources.", "cache_control": {"type": "ephemeral"}}]),
                                          HumanMessage(QUESTION)), [(SystemMessage, "Cite sources.")]),
    ("HumanMessage string", turn(HumanMessage(QUESTION)), [(HumanMessage, QUESTION)]),
    ("HumanMessage text blocks", turn(HumanMessage([{"type": "text", "text": "first"}, {"type": "text", "text": "second"}])),
     [(HumanMessage, "first"), (HumanMessage, "second")]),
    ("HumanMessage bare strings", turn(HumanMessage(["first", "second"])), [(HumanMessage, "first"), (HumanMessage, "second")]),
    ("AIMessage text", turn(HumanMessage(QUESTION), AIMessage("It was 2.1.")), [(AIMessage, "It was 2.1.")]),
    ("AIMessage text blocks", turn(HumanMessage(QUESTION), AIMessage([{"type": "text", "text": "It was 2.1.", "annotations": []}])),
     [(AIMessage, "It was 2.1.")]),
    ("AIMessageChunk", turn(HumanMessage(QUESTION), AIMessageChunk(content="It was 2.1.")), [(AIMessage, "It was 2.1.")]),
    ("ChatMessage user", turn(ChatMessage(role="user", content=QUESTION)), [(HumanMessage, QUESTION)]),
    ("ChatMessage assistant", turn(HumanMessage(QUESTION), ChatMessage(role="assistant", content="It was 2.1.")), [(AIMessage, "It was 2.1.")]),
    ("ChatMessage system", turn(ChatMessage(role="system", content="Answer in English."), HumanMessage(QUESTION)),
     [(SystemMessage, "Answer in English.")]),
]


def received(model: RecordingChatModel) -> list[tuple[type, str]]:
    return [(type(m), part) for m in model.calls[-1] for part in m.text.split("\n")]


@pytest.mark.parametrize("kind, history, expected", ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_each_kind_of_message_reaches_the_model_in_its_role_with_its_text(kind, history, expected):
    model, session = run(history, [search])
    assert session.steps[-1].status == "ready"
    got = received(model)
    for cls, text in expected:
        assert any(issubclass(c, cls) and text in line for c, line in got), (cls.__name__, text, got)
    assert isinstance(model.calls[-1][0], SystemMessage) and not any(isinstance(m, SystemMessage) for m in model.calls[-1][1:])
    assert model.calls[-1][-1].text == "And then?"


# (kind, the tool call's AI message, its result, the pair's status in the manifest)
PAIRS = [
    ("tool_calls and a result", AIMessage("", tool_calls=[CALL]), ToolMessage("found it", tool_call_id="call_1"), "success"),
    ("a result with status=error", AIMessage("", tool_calls=[CALL]), ToolMessage("timeout", tool_call_id="call_1", status="error"), "error"),
    ("a result with an artifact", AIMessage("", tool_calls=[CALL]),
     ToolMessage("found it", tool_call_id="call_1", artifact={"rows": [1, 2]}), "success"),
    ("a result of text blocks", AIMessage("", tool_calls=[CALL]),
     ToolMessage([{"type": "text", "text": "found it"}], tool_call_id="call_1"), "success"),
    ("Anthropic content: text and tool_use", AIMessage([{"type": "text", "text": "Searching."},
                                                        {"type": "tool_use", "id": "call_1", "name": "search", "input": {"query": "3.9"}}],
                                                       tool_calls=[CALL]), ToolMessage("found it", tool_call_id="call_1"), "success"),
    ("standard content: tool_call block", AIMessage([{"type": "text", "text": "Searching."}, {"type": "tool_call", **CALL}], tool_calls=[CALL]),
     ToolMessage("found it", tool_call_id="call_1"), "success"),
    ("Responses content: function_call block", AIMessage([{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "search",
                                                           "arguments": '{"query": "3.9"}'}], tool_calls=[CALL]),
     ToolMessage("found it", tool_call_id="call_1"), "success"),
]


@pytest.mark.parametrize("kind, call, result, status", PAIRS, ids=[p[0] for p in PAIRS])
def test_each_kind_of_tool_pair_reaches_the_model_as_one_call_and_its_result(kind, call, result, status):
    model, session = run(turn(HumanMessage(QUESTION), call, result), [search])
    pairs = session.steps[-1].manifest["tool_pairs"]
    assert [(p["call_id"], p["tool_name"], p["status"]) for p in pairs] == [("call_1", "search", status)]
    sent = model.calls[-1]
    calls = [(i, c) for i, m in enumerate(sent) if isinstance(m, AIMessage) for c in m.tool_calls]
    results = [(i, m) for i, m in enumerate(sent) if isinstance(m, ToolMessage)]
    assert [c["id"] for _, c in calls] == [r.tool_call_id for _, r in results] == ["call_1"]
    assert calls[0][1]["args"] == CALL["args"]
    assert results[0][0] == calls[0][0] + 1 and result.text in results[0][1].text
    # The call is carried once, by tool_calls: no content block repeats it beside the text.
    assert all(isinstance(b, str) or b.get("type") == "text" for b in (sent[calls[0][0]].content if isinstance(sent[calls[0][0]].content, list) else []))
    if "Searching." in str(call.content):
        assert "Searching." in sent[calls[0][0]].text
    assert "rows" not in str(results[0][1].content)  # an artifact is for the agent's code, never the model's input


def block_kinds() -> list[str]:
    """The `type` of every standard content block langchain_core defines (its ContentBlock union)."""
    kinds = []
    pending = list(typing.get_args(blocks.ContentBlock))
    while pending:
        member = pending.pop(0)
        if typing.get_args(member) and not hasattr(member, "__annotations__"):
            pending.extend(typing.get_args(member))
            continue
        kinds.extend(typing.get_args(typing.get_type_hints(member)["type"]))
    return kinds


def test_the_block_table_covers_every_standard_block_langchain_defines():
    assert set(block_kinds()) == {"text", *NOT_TEXT}


NOT_TEXT = {  # a block of each kind that is not text, as a provider integration writes it
    "invalid_tool_call": {"type": "invalid_tool_call", "id": "other", "name": "search", "args": "{", "error": None},
    "reasoning": {"type": "reasoning", "reasoning": "The user wants the release."},
    "refusal": {"type": "refusal", "refusal": "I cannot help with that."},
    "non_standard": {"type": "non_standard", "value": {"kind": "x"}},
    "image": {"type": "image", "url": "https://example.com/a.png"},
    "video": {"type": "video", "url": "https://example.com/a.mp4"},
    "audio": {"type": "audio", "base64": "AAAA", "mime_type": "audio/wav"},
    "text-plain": {"type": "text-plain", "mime_type": "text/plain", "text": "notes"},
    "file": {"type": "file", "url": "https://example.com/a.pdf"},
    "tool_call": {"type": "tool_call", "id": "other", "name": "search", "args": {}},
    "tool_call_chunk": {"type": "tool_call_chunk", "id": "other", "name": "search", "args": "{}", "index": 0},
    "server_tool_call": {"type": "server_tool_call", "id": "ws_1", "name": "web_search", "args": {"query": "3.9"}},
    "server_tool_call_chunk": {"type": "server_tool_call_chunk", "id": "ws_1"},
    "server_tool_result": {"type": "server_tool_result", "tool_call_id": "ws_1", "status": "success"},
}


@pytest.mark.parametrize("kind", sorted(NOT_TEXT))
@pytest.mark.parametrize("speaker", [HumanMessage, AIMessage])
def test_a_block_that_is_not_text_is_refused_naming_its_kind_and_the_model_is_not_called(kind, speaker):
    # A block that is not a call the message lists among its tool_calls has no text the engine can
    # assemble: the step is refused by name, never sent with the block silently left out.
    history = turn(HumanMessage(QUESTION), speaker([{"type": "text", "text": "context"}, NOT_TEXT[kind]]))
    model = RecordingChatModel()
    with pytest.raises(sdk.SDKError, match=rf"messages\[\d+\]\.content\[1\]: only text content is assembled, not '{kind}'"):
        run(history, [search], model=model)
    assert model.calls == []


# (kind, the history, the exception and the words that must name the problem)
REFUSED = [
    ("a ToolMessage with an image block", turn(HumanMessage(QUESTION), AIMessage("", tool_calls=[CALL]),
                                              ToolMessage([{"type": "image", "url": "https://example.com/a.png"}], tool_call_id="call_1")),
     sdk.SDKError, r"messages\[2\]\.content\[0\]: only text content is assembled, not 'image'"),
    ("an AIMessage with invalid tool call arguments", turn(HumanMessage(QUESTION), AIMessage("", invalid_tool_calls=[
        {"type": "invalid_tool_call", "id": "call_1", "name": "search", "args": "{not json", "error": None}])),
     sdk.SDKError, r"messages\[1\]\.tool_calls\[0\]\.function\.arguments: not JSON"),
    ("a tool call without an id", turn(HumanMessage(QUESTION), AIMessage("", tool_calls=[{"name": "search", "args": {}, "id": None}])),
     ValueError, r"the tool call 'search' has no id"),
    ("a result that answers no call", turn(HumanMessage(QUESTION), ToolMessage("orphan", tool_call_id="call_9")),
     sdk.SDKError, r"messages\[1\]\.tool_call_id: no earlier assistant tool call has id 'call_9'"),
    ("a ChatMessage of another role", turn(ChatMessage(role="function", content="x")), sdk.SDKError, r"messages\[0\]\.role: 'function'"),
    ("a FunctionMessage", turn(FunctionMessage(name="search", content="x")), ValueError, r"cannot convert a FunctionMessage"),
]


@pytest.mark.parametrize("kind, history, error, words", REFUSED, ids=[r[0] for r in REFUSED])
def test_a_message_the_engine_cannot_assemble_is_refused_naming_it(kind, history, error, words):
    model = RecordingChatModel()
    with pytest.raises(error, match=words):
        run(history, [search], model=model)
    assert model.calls == []


def test_a_remove_message_is_the_graphs_instruction_not_a_message_and_is_refused_by_name():
    # LangGraph's add_messages reducer consumes RemoveMessage before any model call; handed to the
    # conversion directly it is not silently skipped.
    with pytest.raises(ValueError, match="cannot convert a RemoveMessage"):
        to_openai_messages([HumanMessage(QUESTION), RemoveMessage(id="m1")])


def test_removing_a_message_from_the_state_removes_it_from_what_the_model_sees():
    history = [HumanMessage("an old question", id="h1"), AIMessage("an old answer", id="a1"), HumanMessage(QUESTION, id="h2")]
    model = RecordingChatModel()
    session = sdk.Session("chat-agent", model="gpt-4o")
    agent = create_agent(model, [search], middleware=[ContextMiddleware(session)])
    agent.invoke({"messages": [*history, RemoveMessage(id="a1")]})
    texts = [m.text for m in model.calls[-1]]
    assert "an old answer" not in texts and "an old question" in texts and QUESTION in texts
