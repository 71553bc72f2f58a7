"""The plain provider loops: every tool kind, message role and content kind the providers' own SDKs
define, passed to `session.step`, with the outcome their contracts ask.

The kinds are read from the provider SDKs' own type unions (openai's `ChatCompletionToolUnionParam`,
`ChatCompletionMessageParam`, `ChatCompletionContentPartParam` and the Responses `ToolParam`;
anthropic's `ToolUnionParam` and `ContentBlockParam`), so a kind a new release adds is tested
too. Function tools are assembled with their name and parameters; a provider built-in (it runs on
the provider's side, it is not a function the engine can define) and every content kind that is
not text are refused with an error naming the field and the kind, never turned into something
else or dropped.
"""

from __future__ import annotations

import types
import typing
from typing import Any

import pytest
from anthropic.types import ContentBlockParam, ToolUnionParam
from openai.types.chat import (
    ChatCompletionContentPartParam,
    ChatCompletionMessageParam,
    ChatCompletionToolUnionParam,
)
from openai.types.responses import ToolParam as ResponsesToolParam

from ctxeng import sdk

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
ADAPTERS = {"openai_chat": "gpt-4o", "anthropic_messages": "claude-sonnet-4-5", "openai_responses": "gpt-4o"}


def kinds(union: Any, field: str = "type") -> set[str]:
    out = set()
    for member in typing.get_args(union):
        hint = typing.get_type_hints(member)[field]
        while typing.get_origin(hint) in (typing.Union, types.UnionType):
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        out.update(typing.get_args(hint))
    return out


def session(adapter: str = "openai_chat") -> sdk.Session:
    return sdk.Session("chat-agent", model=ADAPTERS[adapter], adapter=adapter)


def offered(payload: dict[str, Any]) -> dict[str, Any]:
    """name -> parameters of the payload's tools, in whichever provider shape it has."""
    out = {}
    for t in payload.get("tools", []):
        spec = t.get("function", t)
        out[spec["name"]] = spec.get("parameters", spec.get("input_schema"))
    return out


HISTORY = [{"role": "user", "content": "Weather in Oslo?"}]

# (kind, the tool as the caller's provider SDK spells a function)
FUNCTIONS = [
    ("OpenAI chat function", {"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": SCHEMA}}),
    ("Responses function", {"type": "function", "name": "get_weather", "description": "Weather.", "parameters": SCHEMA}),
    ("Anthropic client tool", {"name": "get_weather", "description": "Weather.", "input_schema": SCHEMA}),
    ("Anthropic custom tool", {"type": "custom", "name": "get_weather", "description": "Weather.", "input_schema": SCHEMA}),
]


@pytest.mark.parametrize("adapter", list(ADAPTERS))
@pytest.mark.parametrize("kind, given", FUNCTIONS, ids=[f[0] for f in FUNCTIONS])
def test_a_function_tool_in_any_providers_spelling_is_offered_with_its_parameters(kind, given, adapter):
    payload = session(adapter).step(HISTORY, tools=[given]).raise_for_status().kwargs
    assert offered(payload) == {"get_weather": SCHEMA}


def built_in(kind: str) -> dict[str, Any]:
    return {"type": kind, "name": kind.split("_20")[0]}


# Anthropic's client tools (the text editor, bash) run in the agent, like a function: they are offered by their type.
CLIENT_TOOLS = sorted(k for k in kinds(ToolUnionParam) if k.startswith(("text_editor_", "bash_")))
BUILT_INS = sorted({("openai_chat", k) for k in kinds(ChatCompletionToolUnionParam) - {"function"}}
                   | {("openai_responses", k) for k in kinds(ResponsesToolParam) - {"function"}}
                   | {("anthropic_messages", k) for k in kinds(ToolUnionParam) - {"custom", *CLIENT_TOOLS}})


def test_the_built_in_table_reaches_every_providers_built_ins():
    names = {k for _, k in BUILT_INS}
    assert {"custom", "web_search", "file_search", "code_interpreter", "mcp", "web_search_20250305"} <= names
    assert {"bash_20250124", "text_editor_20250728"} <= set(CLIENT_TOOLS) and not names & set(CLIENT_TOOLS)


@pytest.mark.parametrize("kind", CLIENT_TOOLS)
def test_an_anthropic_client_tool_is_offered_by_its_type_and_declared_by_it(kind):
    name = "str_replace_based_edit_tool" if kind.startswith("text_editor") else "bash"
    step = session("anthropic_messages").step(HISTORY, tools=[FUNCTIONS[2][1], {"type": kind, "name": name}]).raise_for_status()
    assert {"type": kind, "name": name} in step.kwargs["tools"]
    # Without a declaration of its own, the tool's type declares it: the editor's views and the shell's reads are readings.
    edit = {"command": "view", "path": "/r/a.py"} if kind.startswith("text_editor") else {"command": "cat /r/a.py"}
    history = [*HISTORY, {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": name, "input": edit}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "A = 1"}]}]
    step = session("anthropic_messages").step(history, tools=[{"type": kind, "name": name}], system="Be brief.")
    result = next(r for r in step.manifest["included"] if r["item_id"] == step.manifest["tool_pairs"][0]["result_item_id"])
    assert result["source_ref"]["path"] == "/r/a.py"


@pytest.mark.parametrize("adapter, kind", BUILT_INS)
def test_a_provider_built_in_tool_is_refused_naming_it_never_offered_as_a_function(adapter, kind):
    tools = [FUNCTIONS[0][1], built_in(kind)]
    with pytest.raises(sdk.SDKError, match=rf"tools\[1\]\.type: '{kind}' is a provider built-in tool"):
        session(adapter).step(HISTORY, tools=tools)


# --------------------------------------------------------------------------- messages


def test_the_role_table_covers_every_openai_chat_role():
    assert kinds(ChatCompletionMessageParam, "role") == {"developer", "system", "user", "assistant", "tool", "function"}


def test_the_legacy_function_role_is_refused_naming_it():
    with pytest.raises(sdk.SDKError, match=r"messages\[1\]\.role: 'function' is not system, developer, user, assistant or tool"):
        session().step([*HISTORY, {"role": "function", "name": "get_weather", "content": "sunny"}])


def test_every_openai_role_that_is_assembled_keeps_its_text_in_its_place():
    history = [{"role": "system", "content": "Answer briefly."}, {"role": "developer", "content": "Use metric units."},
               {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]},
               {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                                      "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
               {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "4 C, rain"}]},
               {"role": "assistant", "content": "4 C and rain."}, {"role": "user", "content": "And tomorrow?"}]
    messages = session().step(history, tools=[FUNCTIONS[0][1]]).raise_for_status().kwargs["messages"]
    assert "Answer briefly." in messages[0]["content"] and "Use metric units." in messages[0]["content"]
    assert [m["role"] for m in messages[1:]] == ["user", "assistant", "tool", "assistant", "user"]
    assert "4 C, rain" in messages[3]["content"] and messages[4]["content"] == "4 C and rain."


@pytest.mark.parametrize("kind", sorted(kinds(ChatCompletionContentPartParam) - {"text"}))
@pytest.mark.parametrize("role", ["user", "tool"])
def test_an_openai_content_part_that_is_not_text_is_refused_naming_it(kind, role):
    part = {"type": kind}
    history = [*HISTORY, {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                                               "function": {"name": "get_weather", "arguments": "{}"}}]}]
    history.append({"role": role, "content": [{"type": "text", "text": "see"}, part], **({"tool_call_id": "c1"} if role == "tool" else {})})
    with pytest.raises(sdk.SDKError, match=rf"messages\[2\]\.content\[1\]: only text content is assembled, not '{kind}'"):
        session().step(history, tools=[FUNCTIONS[0][1]])


ANTHROPIC_ASSEMBLED = {"text", "tool_use", "tool_result"}


@pytest.mark.parametrize("kind", sorted(kinds(ContentBlockParam) - ANTHROPIC_ASSEMBLED))
@pytest.mark.parametrize("role", ["user", "assistant"])
def test_an_anthropic_block_that_is_not_text_or_a_tool_pair_is_refused_at_its_own_index(kind, role):
    history = [{"role": "user", "content": "Weather in Oslo?"},
               {"role": "assistant", "content": "Checking."},
               {"role": "user", "content": "Go on."}]
    history[2 if role == "user" else 1]["content"] = [{"type": "text", "text": "first"}, {"type": kind}]
    where = 2 if role == "user" else 1
    with pytest.raises(sdk.SDKError, match=rf"messages\[{where}\]\.content\[1\]: only text content is assembled, not '{kind}'"):
        session("anthropic_messages").step({"system": "Answer briefly.", "messages": history})


def test_an_anthropic_tool_pair_with_an_error_result_is_kept_with_its_status():
    history = [{"role": "user", "content": "Weather in Oslo?"},
               {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
                                                 {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
                                             "content": [{"type": "text", "text": "timeout"}]}, {"type": "text", "text": "Try again?"}]}]
    step = session("anthropic_messages").step({"system": "Answer briefly.", "messages": history}, tools=[FUNCTIONS[2][1]]).raise_for_status()
    assert [(p["call_id"], p["status"]) for p in step.manifest["tool_pairs"]] == [("toolu_1", "error")]
    sent = step.kwargs["messages"]
    uses = [b for m in sent for b in m["content"] if isinstance(b, dict) and b["type"] == "tool_use"]
    results = [b for m in sent for b in m["content"] if isinstance(b, dict) and b["type"] == "tool_result"]
    assert [u["id"] for u in uses] == [r["tool_use_id"] for r in results] == ["toolu_1"] and uses[0]["input"] == {"city": "Oslo"}
