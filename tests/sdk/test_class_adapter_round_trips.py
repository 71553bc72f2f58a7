"""Bug class 4 (issue 54): every adapter's round trip, for every content mix its provider allows.

A history is read in (the caller's format), assembled with the chat-agent starter (everything
fits), serialized by the adapter, and read back (`step.messages`, in the caller's format). Read
back, the caller's turns are what the caller wrote: the same roles, texts, calls (ids, names,
arguments) and results, in the same order; the only differences are the engine's own: the system
text gains the data-boundary notice and each tool result is fenced as data (unfenced here with
the fence docs/sdk.md documents). The caller's own list is never changed.

The mixes: an assistant turn with text and a call; one with several calls; a tool result with
structured content (a list of text parts holding JSON); empty contents (an empty tool result, an
assistant turn that only calls). Images are not assembled by any adapter (docs/sdk.md: text only):
each refuses one by its path, never dropping it silently.

Adapters: `openai_chat`, `anthropic_messages`, `openai_responses` (each from OpenAI chat dicts),
Anthropic messages in and out, LangChain messages in and out (`ctxeng.sdk.langchain`), and the
Agents SDK's Responses items in and out (`ctxeng.sdk.openai_agents`).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from ctxeng import sdk
from ctxeng.sdk.errors import SDKError

MODELS = {"openai_chat": "gpt-4o", "anthropic_messages": "claude-sonnet-4-5", "openai_responses": "gpt-4o"}
SYSTEM = "You look orders up before answering."
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Look an order up",
          "parameters": {"type": "object", "properties": {"order": {"type": "string"}}}}}]
OPEN, CLOSE = "<<<ctx untrusted>>>\n", "\n<<<ctx:end>>>"


def call(call_id: str, order: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"order": order})}}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def tool(call_id: str, content: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


# Each mix is an OpenAI chat history: a system message, then turns as an agent loop writes them.
MIXES: dict[str, list[dict[str, Any]]] = {
    "text_and_a_call": [
        user("Where is order A-1?"),
        {"role": "assistant", "content": "Let me look that up.", "tool_calls": [call("call_1", "A-1")]},
        tool("call_1", "A-1 shipped on Monday."),
        {"role": "assistant", "content": "It shipped on Monday."},
    ],
    "several_calls": [
        user("Compare orders A-1, A-2 and A-3."),
        {"role": "assistant", "content": None, "tool_calls": [call("call_1", "A-1"), call("call_2", "A-2"), call("call_3", "A-3")]},
        tool("call_1", "A-1 shipped."),
        tool("call_2", "A-2 is packed."),
        tool("call_3", "A-3 was cancelled."),
        {"role": "assistant", "content": "One shipped, one packed, one cancelled."},
    ],
    "structured_result": [
        user("What is in order A-1?"),
        {"role": "assistant", "content": "Checking.", "tool_calls": [call("call_1", "A-1")]},
        tool("call_1", [{"type": "text", "text": json.dumps({"order": "A-1", "items": [{"sku": "S-1", "qty": 2}]})}]),
        {"role": "assistant", "content": "Two of S-1."},
    ],
    "empty_contents": [
        user("Is there a note on order A-9?"),
        {"role": "assistant", "content": None, "tool_calls": [call("call_1", "A-9")]},
        tool("call_1", ""),
        {"role": "assistant", "content": "There is no note on A-9."},
        user("And on A-10?"),
    ],
}


def history(mix: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM}, *copy.deepcopy(MIXES[mix])]


def unfenced(text: str) -> str:
    """A tool result's text as the caller wrote it: the engine fences it as untrusted data."""
    assert text.startswith(OPEN) and text.endswith(CLOSE), text
    return text[len(OPEN):-len(CLOSE)]


def plain(content: Any) -> Any:
    """Text parts as the one string they are (a tool result's parts are read as one text)."""
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content)
    return content


def openai_turns(messages: list[dict[str, Any]], *, sent: bool) -> list[tuple]:
    """What a round trip must keep of OpenAI chat dicts, system message aside: each message's role,
    text, calls (id, name, parsed arguments) and result call id; a sent result unfenced."""
    out = []
    for m in messages:
        if m["role"] == "system":
            continue
        calls = tuple((c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m.get("tool_calls") or [])
        content = m.get("content")
        if m["role"] == "tool":
            content = plain(content)
            content = unfenced(content) if sent else content
        elif m["role"] == "assistant" and calls:
            content = content or None  # "" and None both say: this turn only calls
        out.append((m["role"], content, calls, m.get("tool_call_id")))
    return out


def step(adapter: str, messages: Any, **kwargs: Any):
    session = sdk.Session("chat-agent", model=MODELS[adapter], adapter=adapter, run_id="run-round-trip")
    return session.step(messages, tools=TOOLS, **kwargs).raise_for_status()


# --------------------------------------------------------------------------- OpenAI chat dicts in, through each adapter


@pytest.mark.parametrize("mix", list(MIXES))
@pytest.mark.parametrize("adapter", list(MODELS))
def test_openai_chat_dicts_read_back_through_each_adapter_are_the_callers_turns(adapter, mix):
    given = history(mix)
    before = copy.deepcopy(given)
    s = step(adapter, given)
    assert given == before  # the caller's list and its messages are not changed
    back = s.messages
    assert back[0]["role"] == "system" and back[0]["content"].startswith(SYSTEM)
    assert openai_turns(back, sent=True) == openai_turns(given, sent=False)


@pytest.mark.parametrize("adapter", list(MODELS))
def test_a_user_turn_reads_back_as_the_callers_own_string_through_each_adapter(adapter):
    back = step(adapter, history("text_and_a_call")).messages
    assert back[1] == {"role": "user", "content": "Where is order A-1?"}


@pytest.mark.parametrize("adapter", list(MODELS))
def test_a_text_and_call_turn_reads_back_as_one_assistant_message_with_its_text_and_its_call(adapter):
    back = step(adapter, history("text_and_a_call")).messages
    [turn] = [m for m in back if m.get("tool_calls")]
    assert turn["content"] == "Let me look that up."
    assert [c["id"] for c in turn["tool_calls"]] == ["call_1"]


@pytest.mark.parametrize("adapter", list(MODELS))
def test_a_caller_id_the_provider_would_refuse_reads_back_as_the_callers_own_id(adapter):
    given = history("several_calls")
    given[2]["tool_calls"][1]["id"] = given[4]["tool_call_id"] = "call.2/weird"
    sent = json.dumps(step(adapter, given).kwargs)
    assert "call.2/weird" not in sent  # rewritten for the provider
    assert openai_turns(step(adapter, given).messages, sent=True) == openai_turns(given, sent=False)


# --------------------------------------------------------------------------- Anthropic messages in and out


def anthropic_history(mix: str) -> list[dict[str, Any]]:
    """The mix in Anthropic's shape: calls as tool_use blocks, results as tool_result blocks in a user turn."""
    out: list[dict[str, Any]] = []
    for m in MIXES[mix]:
        if m["role"] == "tool":
            block = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
            continue
        blocks = [{"type": "text", "text": m["content"]}] if m["content"] else []
        blocks += [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"], "input": json.loads(c["function"]["arguments"])}
                   for c in m.get("tool_calls") or []]
        out.append({"role": m["role"], "content": blocks if m["role"] == "assistant" or blocks != [{"type": "text", "text": m["content"]}] else m["content"]})
    return out


def anthropic_turns(messages: list[dict[str, Any]], *, sent: bool) -> list[tuple]:
    out = []
    for m in messages:
        if isinstance(m["content"], str):
            out.append((m["role"], "text", m["content"]))
            continue
        for b in m["content"]:
            if b["type"] == "text":
                out.append((m["role"], "text", b["text"]))
            elif b["type"] == "tool_use":
                out.append((m["role"], "tool_use", b["id"], b["name"], b["input"]))
            else:
                text = plain(b["content"])
                out.append((m["role"], "tool_result", b["tool_use_id"], unfenced(text) if sent else text))
    return out


@pytest.mark.parametrize("mix", list(MIXES))
@pytest.mark.parametrize("adapter", list(MODELS))
def test_anthropic_messages_read_back_through_each_adapter_are_the_callers_turns(adapter, mix):
    given = anthropic_history(mix)
    before = copy.deepcopy(given)
    s = step(adapter, given, system=SYSTEM)
    assert given == before
    assert s.system.startswith(SYSTEM)
    assert anthropic_turns(s.messages, sent=True) == anthropic_turns(given, sent=False)


# --------------------------------------------------------------------------- LangChain messages in and out


@pytest.mark.parametrize("mix", list(MIXES))
@pytest.mark.parametrize("adapter", list(MODELS))
def test_langchain_messages_read_back_through_each_adapter_are_the_callers_turns(adapter, mix):
    from ctxeng.sdk.langchain import from_openai_messages

    given = from_openai_messages(history(mix))
    before = [m.model_copy(deep=True) for m in given]
    back = step(adapter, given).messages
    assert given == before
    assert type(back[0]).__name__ == "SystemMessage"
    # The oracle is the test's own OpenAI history, read off the LangChain messages' attributes.
    assert langchain_turns(back) == openai_turns(history(mix), sent=False)


def langchain_turns(messages: list[Any]) -> list[tuple]:
    """`openai_turns` of LangChain messages, read from their attributes (a result unfenced)."""
    roles = {"HumanMessage": "user", "AIMessage": "assistant", "ToolMessage": "tool"}
    out = []
    for m in messages[1:]:
        role = roles[type(m).__name__]
        calls = tuple((c["id"], c["name"], c["args"]) for c in getattr(m, "tool_calls", []) or [])
        content = m.content
        if role == "tool":
            content = unfenced(plain(content))
        elif role == "assistant" and calls:
            content = content or None
        out.append((role, content, calls, getattr(m, "tool_call_id", None)))
    return out


# --------------------------------------------------------------------------- the Agents SDK's Responses items in and out


def agents_items(items: list[dict[str, Any]], *, sent: bool) -> list[dict[str, Any]]:
    """Responses items as a round trip must keep them: a message's text parts as the one text the
    session reads them as (joined by newlines, docs/sdk.md), arguments parsed (the engine sends a
    call's arguments as canonical JSON), a sent result unfenced."""
    out = copy.deepcopy(items)
    for item in out:
        if item["type"] == "message" and isinstance(item["content"], list):
            item["content"] = "\n".join(p["text"] for p in item["content"])
        elif item["type"] == "function_call":
            item["arguments"] = json.loads(item["arguments"])
        elif item["type"] == "function_call_output" and sent:
            item["output"] = unfenced(item["output"])
    return out


@pytest.mark.parametrize("mix", list(MIXES))
@pytest.mark.parametrize("adapter", list(MODELS))
def test_agents_sdk_items_read_back_through_the_context_filter_conversions_are_the_callers_items(adapter, mix):
    # What `context_filter` does: items to chat messages, a step in OpenAI format, back to items.
    from ctxeng.sdk.openai_agents import to_chat_messages, to_responses_items

    items = to_responses_items(history(mix)[1:])
    # The Agents SDK's own user input: a message of input_text parts.
    items[0]["content"] = [{"type": "input_text", "text": items[0]["content"]}, {"type": "input_text", "text": "Please hurry."}]
    before = copy.deepcopy(items)
    s = step(adapter, to_chat_messages(items, instructions=SYSTEM), format="openai")
    assert items == before
    back = s.messages
    assert back[0]["role"] == "system" and s.system.startswith(SYSTEM)
    assert agents_items(to_responses_items(back[1:]), sent=True) == agents_items(items, sent=False)


# --------------------------------------------------------------------------- images: refused by path, never dropped


IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


@pytest.mark.parametrize("adapter", list(MODELS))
def test_an_image_in_a_user_turn_is_refused_naming_its_path_through_each_adapter(adapter):
    given = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": [{"type": "text", "text": "What is this?"}, IMAGE]}]
    with pytest.raises(SDKError, match=r"messages\[1\]\.content\[1\].*image_url"):
        step(adapter, given)


def test_an_anthropic_image_block_is_refused_naming_its_path():
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    given = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}]
    with pytest.raises(SDKError, match=r"messages\[0\]\.content\[1\].*image"):
        step("anthropic_messages", given, system=SYSTEM)
