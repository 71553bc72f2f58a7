"""ctxeng.sdk.openai_agents: context_filter in a real OpenAI Agents SDK run (`Runner.run`), with a
scripted `Model` (tests/sdk/conftest.py) playing three steps: two tool calls, then an answer.

The oracle for "the model saw the payload" is rebuilt from what the model received — its
instructions and Responses-API input items — written out here by hand as the OpenAI chat payload
(not with the adapter's conversions): the instructions as the system message, each caller call id
mapped back to the manifest's `serialized_call_id`, the agent's tool definitions as the model got
them; its sha256 must be the manifest's `serialized_model_input_hash`.
"""

from __future__ import annotations

import asyncio
import importlib
import io
import json
import re
import sys
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner

from ctxeng import sdk
from ctxeng.engine.hashing import sha256_json
from ctxeng.sdk.openai_agents import context_filter, to_chat_messages, to_responses_items
from tests.sdk.conftest import ANSWER, INJECTION, READING, SECOND_CALL_ID, TASK, WEIRD_CALL_ID

SNIPPET = Path(__file__).resolve().parents[2] / "docs" / "snippets" / "openai_agents.py"
# A tool result's fence in its tool message (docs/sdk.md "What the model sees").
FENCE = re.compile(r"\A<<<ctx (\w+)((?: [^\n<>]*)?)>>>\n(.*)\n<<<ctx:end>>>\Z", re.S)
INSTRUCTIONS = "You answer questions about releases."


def payload_seen(call: dict[str, Any], manifest: dict[str, Any], model: str = "gpt-4o") -> dict[str, Any]:
    """The OpenAI chat payload of what one model call received, with the manifest's call ids."""
    serialized = {p["call_id"]: p["serialized_call_id"] for p in manifest["tool_pairs"]}
    messages: list[dict[str, Any]] = [{"role": "system", "content": call["instructions"]}]
    for item in call["input"]:
        kind = item.get("type", "message")
        if kind == "message" and item["role"] == "assistant":
            messages.append({"role": "assistant", "content": item["content"]})
        elif kind == "message":
            content = item["content"]
            if isinstance(content, list):
                assert {part["type"] for part in content} == {"input_text"}
                content = [{"type": "text", "text": part["text"]} for part in content]
            messages.append({"role": item["role"], "content": content})
        elif kind == "function_call":
            function_call = {"id": serialized[item["call_id"]], "type": "function", "function": {"name": item["name"], "arguments": item["arguments"]}}
            if messages[-1]["role"] == "assistant" and "tool_calls" not in messages[-1]:
                messages[-1]["tool_calls"] = [function_call]  # the text and the calls of one turn
            elif messages[-1]["role"] == "assistant":
                messages[-1]["tool_calls"].append(function_call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [function_call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": serialized[item["call_id"]], "content": item["output"]})
        else:
            raise AssertionError(f"the model received a {kind!r} item")
    tools = [{"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.params_json_schema}} for t in call["tools"]]
    return {"model": model, "messages": messages, "tools": tools}


def make_agent(model: Any, tools: list[Any]) -> Agent:
    # The tools in name order: the SDK sends the agent's order, the payload lists them by name.
    return Agent(name="releases", instructions=INSTRUCTIONS, model=model, tools=tools)


def run(agent: Agent, session: sdk.Session, *, run_async: bool = False, **options: Any) -> Any:
    config = RunConfig(call_model_input_filter=context_filter(session, **options))
    if run_async:
        return asyncio.run(Runner.run(agent, TASK, run_config=config))
    return Runner.run_sync(agent, TASK, run_config=config)


@pytest.fixture(params=["run_sync", "run"])
def three_steps(request, scripted_agents_model, agents_tools, chat_policy):
    model = scripted_agents_model()
    session = sdk.Session(chat_policy, model="gpt-4o")
    result = run(make_agent(model, agents_tools), session, run_async=request.param == "run")
    return model, session, result


def test_each_model_call_sees_exactly_the_payload_its_sealed_manifest_hashes(three_steps):
    model, session, _ = three_steps
    assert len(model.calls) == len(session.steps) == 3
    for call, step in zip(model.calls, session.steps, strict=True):
        assert step.status == "ready"
        assert sha256_json(payload_seen(call, step.manifest)) == step.manifest["assembly"]["serialized_model_input_hash"]
        assert payload_seen(call, step.manifest) == step.kwargs
        assert call["instructions"] == step.system


def test_the_model_gets_the_callers_own_call_ids_and_step_messages_keep_them(three_steps):
    model, session, _ = three_steps
    last = session.steps[-1]
    pairs = {p["call_id"]: p["serialized_call_id"] for p in last.manifest["tool_pairs"]}
    assert set(pairs) == {WEIRD_CALL_ID, SECOND_CALL_ID}
    assert pairs[WEIRD_CALL_ID] != WEIRD_CALL_ID  # the provider-safe id differs: the mapping back is exercised
    call_ids = [c["id"] for m in last.messages for c in m.get("tool_calls") or []]
    result_ids = [m["tool_call_id"] for m in last.messages if m["role"] == "tool"]
    assert call_ids == result_ids == [WEIRD_CALL_ID, SECOND_CALL_ID]
    received = model.calls[-1]["input"]
    assert [i["call_id"] for i in received if i.get("type") == "function_call"] == [WEIRD_CALL_ID, SECOND_CALL_ID]
    assert [i["call_id"] for i in received if i.get("type") == "function_call_output"] == [WEIRD_CALL_ID, SECOND_CALL_ID]


def test_an_injected_tool_result_reaches_the_model_fenced_as_data_and_never_as_instructions(three_steps):
    model, session, _ = three_steps
    call, manifest = model.calls[-1], session.steps[-1].manifest
    injected = [i for i in call["input"] if INJECTION in json.dumps(i)]
    assert len(injected) == 1 and injected[0]["type"] == "function_call_output"
    fence = FENCE.match(injected[0]["output"])
    assert fence is not None, injected[0]["output"]
    trust, _rest, body = fence.groups()
    assert trust == "untrusted" and manifest["assembly"]["data_fence_nonce"] == ""
    assert body == INJECTION
    assert INJECTION not in call["instructions"]
    assert not [i for i in call["input"] if i.get("role") in ("system", "developer")]


def test_one_run_has_one_manifest_per_model_call(three_steps):
    _, session, result = three_steps
    headers = [step.manifest["assembly"] for step in session.steps]
    assert len({h["run_id"] for h in headers}) == 1
    assert len({h["step_id"] for h in headers}) == len({h["id"] for h in headers}) == 3
    assert result.final_output == ANSWER


def test_the_run_keeps_its_own_items_unfenced(three_steps):
    _, _, result = three_steps
    items = json.dumps(result.to_input_list())
    assert TASK in items and READING in items and "<<<ctx" not in items


def test_a_blocked_assembly_raises_context_blocked_with_its_manifest_and_the_model_is_not_called(
        scripted_agents_model, agents_tools, blocking_policy):
    model = scripted_agents_model()
    with pytest.raises(sdk.ContextBlocked) as blocked:
        run(make_agent(model, agents_tools), sdk.Session(blocking_policy, model="gpt-4o"))
    assert model.calls == []
    assert blocked.value.manifest["assembly"]["status"] == "blocked"
    assert blocked.value.manifest["assembly"]["serialized_model_input_hash"] is None
    assert blocked.value.manifest["assembly"]["missing"] == ["task_brief"]  # the part the policy requires and no chat has
    assert blocked.value.reason == blocked.value.manifest["assembly"]["blocked_reason"] is not None


def test_passthrough_sends_the_sdks_own_input(scripted_agents_model, agents_tools, blocking_policy):
    model = scripted_agents_model()
    session = sdk.Session(blocking_policy, model="gpt-4o")
    result = run(make_agent(model, agents_tools), session, on_blocked="passthrough")
    assert model.calls[0]["instructions"] == INSTRUCTIONS
    assert model.calls[0]["input"] == [{"role": "user", "content": TASK}]
    assert result.final_output == ANSWER
    assert [step.status for step in session.steps] == ["blocked"] * 3


def test_an_on_blocked_callable_decides_what_is_sent(scripted_agents_model, agents_tools, blocking_policy):
    from agents.run import ModelInputData

    model = scripted_agents_model()
    seen = []

    def only_the_task(step, data):
        seen.append(step.blocked_reason)
        return ModelInputData(input=[{"role": "user", "content": TASK}], instructions="Say what is missing.")

    run(make_agent(model, agents_tools), sdk.Session(blocking_policy, model="gpt-4o"), on_blocked=only_the_task)
    assert [c["instructions"] for c in model.calls] == ["Say what is missing."] * 3
    assert len(seen) == 3 and None not in seen


def test_on_blocked_refuses_anything_but_raise_passthrough_or_a_callable():
    with pytest.raises(ValueError, match="on_blocked"):
        context_filter(object(), on_blocked="ignore")


def test_responses_items_become_chat_messages_one_turn_per_model_answer():
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "Looking.", "annotations": []}]},
        {"type": "function_call", "id": "__fake_id__", "call_id": WEIRD_CALL_ID, "name": "search", "arguments": "{}"},
        {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "search", "arguments": '{"q":1}'},
        {"type": "function_call_output", "call_id": WEIRD_CALL_ID, "output": "r1"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "r2"}]},
        {"type": "function_call", "id": "fc_3", "call_id": "c3", "name": "search", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c3", "output": "r3"},
    ]
    assert to_chat_messages(items, instructions="rules") == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": "Looking.", "id": "msg_1", "tool_calls": [
            {"id": WEIRD_CALL_ID, "type": "function", "function": {"name": "search", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "search", "arguments": '{"q":1}'}},
        ]},
        {"role": "tool", "tool_call_id": WEIRD_CALL_ID, "content": "r1"},
        {"role": "tool", "tool_call_id": "c2", "content": "r2"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c3", "type": "function", "function": {"name": "search", "arguments": "{}"}}], "id": "fc_3"},
        {"role": "tool", "tool_call_id": "c3", "content": "r3"},
    ]


def test_an_id_two_items_share_is_no_items_id():
    items = [{"type": "message", "role": "user", "id": "dup", "content": "a"}, {"type": "message", "role": "user", "id": "dup", "content": "b"}]
    assert [m.get("id") for m in to_chat_messages(items)] == [None, None]


def test_an_item_with_no_chat_form_is_refused_by_name():
    with pytest.raises(ValueError, match="'computer_call'"):
        to_chat_messages([{"type": "computer_call", "call_id": "c"}])
    with pytest.raises(ValueError, match="'input_image'"):
        to_chat_messages([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}])


def test_chat_messages_become_responses_items():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "q"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
        {"role": "assistant", "content": "t", "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "r2"},
        {"role": "assistant", "content": "done"},
    ]
    assert to_responses_items(messages) == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]},
        {"type": "function_call", "call_id": "c1", "name": "search", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "r"},
        {"type": "message", "role": "assistant", "content": "t"},
        {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": "r2"},
        {"type": "message", "role": "assistant", "content": "done"},
    ]


def test_without_openai_agents_the_filter_names_the_extra(monkeypatch):
    monkeypatch.delitem(sys.modules, "ctxeng.sdk.openai_agents")
    monkeypatch.delattr(sdk, "openai_agents")
    monkeypatch.setitem(sys.modules, "agents.run", None)
    module = importlib.import_module("ctxeng.sdk.openai_agents")
    with pytest.raises(ImportError, match=re.escape("pip install '.[frameworks]' in a ctxeng checkout")):
        module.context_filter(object())(object())


def test_the_readme_snippet_runs_as_written(scripted_agents_model, agents_tools):
    text = SNIPPET.read_text().split("# --- README ---\n")[1].split("# --- end README ---")[0]
    model = scripted_agents_model()
    namespace: dict[str, Any] = {"agent": make_agent(model, agents_tools), "__name__": "readme_snippet"}
    out = io.StringIO()
    with redirect_stdout(out):
        exec(compile(text, str(SNIPPET), "exec"), namespace)
    session = namespace["session"]
    assert len(model.calls) == len(session.steps) == 3
    for call, step in zip(model.calls, session.steps, strict=True):
        assert sha256_json(payload_seen(call, step.manifest)) == step.manifest["assembly"]["serialized_model_input_hash"]
    assert namespace["result"].final_output == ANSWER
    assert ANSWER in out.getvalue() and session.steps[-1].assembly_id in out.getvalue()


def test_a_step_that_opens_with_no_system_message_sends_every_message_as_input():
    # Only a leading system message becomes `instructions`; a step whose messages open with a user
    # turn (a session-like object with no system text) keeps that turn in the model's input.
    from types import SimpleNamespace

    from agents.run import CallModelData, ModelInputData

    user = {"role": "user", "content": TASK}
    answer = {"role": "assistant", "content": ANSWER}

    class NoSystemSession:
        async def astep(self, messages, **options):
            return SimpleNamespace(status="ready", messages=[user, answer], system=None)

    data = CallModelData(model_data=ModelInputData(input=TASK, instructions=None),
                         agent=Agent(name="releases"), context=None)
    sent = asyncio.run(context_filter(NoSystemSession())(data))
    assert sent.instructions is None
    assert sent.input == [{"type": "message", "role": "user", "content": TASK},
                          {"type": "message", "role": "assistant", "content": ANSWER}]


def test_a_plain_string_input_becomes_one_user_message():
    assert to_chat_messages(TASK) == [{"role": "user", "content": TASK}]
    assert to_chat_messages(TASK, instructions="rules") == [{"role": "system", "content": "rules"}, {"role": "user", "content": TASK}]
