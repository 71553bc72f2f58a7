"""ctxeng.sdk.langchain: ContextMiddleware in a real LangChain v1 agent (`create_agent`), with a
scripted chat model (tests/sdk/conftest.py) playing three steps: two tool calls, then an answer.

The oracle for "the model saw the payload" is rebuilt from what the model received, written out
here by hand from the OpenAI chat format (not with the SDK's conversions): the messages and tool
definitions, each caller tool-call id mapped back to the manifest's `serialized_call_id`, and
the arguments in the canonical JSON the manifest names (`tool_name_plus_canonical_json_args/v1`);
its sha256 must be the manifest's `serialized_model_input_hash`.
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
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from ctxeng import sdk
from ctxeng.engine.hashing import sha256_json
from ctxeng.sdk.langchain import ContextMiddleware, from_openai_messages, to_openai_messages
from tests.sdk.conftest import ANSWER, INJECTION, READING, SECOND_CALL_ID, TASK, WEIRD_CALL_ID

SNIPPET = Path(__file__).resolve().parents[2] / "docs" / "snippets" / "langchain.py"
# A tool result's fence in its tool message (docs/sdk.md "What the model sees").
FENCE = re.compile(r"\A<<<ctx (\w+)((?: [^\n<>]*)?)>>>\n(.*)\n<<<ctx:end>>>\Z", re.S)


def canonical_arguments(args: dict[str, Any]) -> str:
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def payload_seen(call: dict[str, Any], manifest: dict[str, Any], model: str = "gpt-4o") -> dict[str, Any]:
    """The OpenAI chat payload of what one model call received, with the manifest's call ids."""
    serialized = {p["call_id"]: p["serialized_call_id"] for p in manifest["tool_pairs"]}
    messages: list[dict[str, Any]] = []
    for m in call["messages"]:
        if isinstance(m, SystemMessage):
            messages.append({"role": "system", "content": m.content})
        elif isinstance(m, HumanMessage):
            messages.append({"role": "user", "content": m.content})
        elif isinstance(m, AIMessage) and m.tool_calls:
            calls = [{"id": serialized[c["id"]], "type": "function", "function": {"name": c["name"], "arguments": canonical_arguments(c["args"])}}
                     for c in m.tool_calls]
            messages.append({"role": "assistant", "content": m.content or None, "tool_calls": calls})
        elif isinstance(m, AIMessage):
            messages.append({"role": "assistant", "content": m.content})
        elif isinstance(m, ToolMessage):
            messages.append({"role": "tool", "tool_call_id": serialized[m.tool_call_id], "content": m.content})
        else:
            raise AssertionError(f"the model received a {type(m).__name__}")
    payload: dict[str, Any] = {"model": model, "messages": messages}
    if call["tools"]:
        payload["tools"] = call["tools"]
    return payload


def run_agent(model: Any, tools: list[Any], session: Any, *, run_async: bool = False, **options: Any) -> dict[str, Any]:
    agent = create_agent(model, tools, system_prompt="You answer questions about releases.",
                         middleware=[ContextMiddleware(session, **options)])
    state = {"messages": [{"role": "user", "content": TASK}]}
    return asyncio.run(agent.ainvoke(state)) if run_async else agent.invoke(state)


@pytest.fixture(params=["invoke", "ainvoke"])
def three_steps(request, scripted_chat_model, langchain_tools, chat_policy):
    model = scripted_chat_model()
    session = sdk.Session(chat_policy, model="gpt-4o")
    result = run_agent(model, langchain_tools, session, run_async=request.param == "ainvoke")
    return model, session, result


def test_each_model_call_sees_exactly_the_payload_its_sealed_manifest_hashes(three_steps):
    model, session, _ = three_steps
    assert len(model.calls) == len(session.steps) == 3
    for call, step in zip(model.calls, session.steps, strict=True):
        assert step.status == "ready"
        assert sha256_json(payload_seen(call, step.manifest)) == step.manifest["assembly"]["serialized_model_input_hash"]
        assert payload_seen(call, step.manifest) == step.kwargs


def test_the_model_gets_the_callers_own_tool_call_ids_and_step_messages_keep_them(three_steps):
    model, session, _ = three_steps
    last = session.steps[-1]
    pairs = {p["call_id"]: p["serialized_call_id"] for p in last.manifest["tool_pairs"]}
    assert set(pairs) == {WEIRD_CALL_ID, SECOND_CALL_ID}
    assert pairs[WEIRD_CALL_ID] != WEIRD_CALL_ID  # the provider-safe id differs: the mapping back is exercised
    for messages in (last.messages, model.calls[-1]["messages"]):
        call_ids = [c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
        result_ids = [m.tool_call_id for m in messages if isinstance(m, ToolMessage)]
        assert call_ids == result_ids == [WEIRD_CALL_ID, SECOND_CALL_ID]


def test_an_injected_tool_result_reaches_the_model_fenced_as_data_and_never_as_instructions(three_steps):
    model, session, _ = three_steps
    received, manifest = model.calls[-1]["messages"], session.steps[-1].manifest
    injected = [m for m in received if INJECTION in m.text]
    assert len(injected) == 1 and isinstance(injected[0], ToolMessage)
    fence = FENCE.match(injected[0].content)
    assert fence is not None, injected[0].content
    trust, _rest, body = fence.groups()
    assert trust == "untrusted" and manifest["assembly"]["data_fence_nonce"] == ""
    assert body == INJECTION
    system = [m for m in received if isinstance(m, SystemMessage)]
    assert received[0] is system[0] and len(system) == 1
    assert INJECTION not in system[0].text


def test_one_run_has_one_manifest_per_model_call(three_steps):
    _, session, result = three_steps
    headers = [step.manifest["assembly"] for step in session.steps]
    assert len({h["run_id"] for h in headers}) == 1
    assert len({h["step_id"] for h in headers}) == len({h["id"] for h in headers}) == 3
    answers = [m for m in result["messages"] if isinstance(m, AIMessage)]
    assert [m.response_metadata["ctxeng"]["assembly_id"] for m in answers] == [step.assembly_id for step in session.steps]
    meta = answers[-1].response_metadata["ctxeng"]
    assert meta["status"] == "ready" and meta["step_id"] == headers[-1]["step_id"] and meta["run_id"] == headers[-1]["run_id"]
    assert meta["serialized_model_input_hash"] == headers[-1]["serialized_model_input_hash"]
    assert meta["manifest_digest"] == sha256_json(session.steps[-1].manifest)


def test_the_agent_keeps_its_whole_history_and_the_answer(three_steps):
    _, _, result = three_steps
    texts = [m.text for m in result["messages"]]
    assert texts[0] == TASK and texts[-1] == ANSWER and READING in texts
    assert not any("<<<ctx" in t for t in texts)  # the fences are the model's view, not the agent's state


def test_a_blocked_assembly_raises_context_blocked_with_its_manifest_and_the_model_is_not_called(
        scripted_chat_model, langchain_tools, blocking_policy):
    model = scripted_chat_model()
    with pytest.raises(sdk.ContextBlocked) as blocked:
        run_agent(model, langchain_tools, sdk.Session(blocking_policy, model="gpt-4o"))
    assert model.calls == []
    assert blocked.value.manifest["assembly"]["status"] == "blocked"
    assert blocked.value.manifest["assembly"]["serialized_model_input_hash"] is None
    assert blocked.value.manifest["assembly"]["missing"] == ["task_brief"]  # the part the policy requires and no chat has
    assert blocked.value.reason == blocked.value.manifest["assembly"]["blocked_reason"] is not None


def test_a_blocked_assembly_raises_in_the_async_agent_too(scripted_chat_model, langchain_tools, blocking_policy):
    model = scripted_chat_model()
    with pytest.raises(sdk.ContextBlocked):
        run_agent(model, langchain_tools, sdk.Session(blocking_policy, model="gpt-4o"), run_async=True)
    assert model.calls == []


def test_passthrough_sends_the_agents_own_request_and_marks_the_answer_blocked(scripted_chat_model, langchain_tools, blocking_policy):
    model = scripted_chat_model()
    result = run_agent(model, langchain_tools, sdk.Session(blocking_policy, model="gpt-4o"), on_blocked="passthrough")
    first = model.calls[0]["messages"]
    assert [type(m) for m in first] == [SystemMessage, HumanMessage]
    assert first[0].content == "You answer questions about releases." and first[1].content == TASK
    answers = [m for m in result["messages"] if isinstance(m, AIMessage)]
    assert len(answers) == 3 and {m.response_metadata["ctxeng"]["status"] for m in answers} == {"blocked"}


@pytest.mark.parametrize("run_async", [False, True])
def test_an_on_blocked_callable_answers_in_the_models_place(scripted_chat_model, langchain_tools, blocking_policy, run_async):
    model = scripted_chat_model()
    seen = []

    def explain(step, request):
        seen.append((step.status, request.messages[-1].content))
        return AIMessage(content=f"I cannot answer yet: {step.blocked_reason}")

    result = run_agent(model, langchain_tools, sdk.Session(blocking_policy, model="gpt-4o"), on_blocked=explain, run_async=run_async)
    assert model.calls == []
    assert seen == [("blocked", TASK)]
    last = result["messages"][-1]
    assert last.text.startswith("I cannot answer yet: ")
    assert last.response_metadata["ctxeng"]["status"] == "blocked"


def test_on_blocked_refuses_anything_but_raise_passthrough_or_a_callable():
    with pytest.raises(ValueError, match="on_blocked"):
        ContextMiddleware(object(), on_blocked="ignore")


def test_messages_roundtrip_through_openai_chat_dicts_with_ids_content_parts_and_calls():
    parts = [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]
    messages = [
        SystemMessage(content="rules", id="sys-1"),
        SystemMessage(content="dev rules", additional_kwargs={"__openai_role__": "developer"}),
        HumanMessage(content=parts, id="human-1"),
        AIMessage(content="", id="ai-1", tool_calls=[{"name": "search", "args": {"q": "<x>"}, "id": WEIRD_CALL_ID}]),
        ToolMessage(content="found", tool_call_id=WEIRD_CALL_ID, id="tool-1"),
        AIMessage(content="broken", invalid_tool_calls=[{"type": "invalid_tool_call", "name": "search", "args": "{not json", "id": "c2", "error": None}]),
        ToolMessage(content="failed", tool_call_id="c2", status="error"),
        AIMessage(content=parts),
    ]
    dicts = to_openai_messages(messages)
    assert dicts == [
        {"role": "system", "content": "rules", "id": "sys-1"},
        {"role": "developer", "content": "dev rules"},
        {"role": "user", "content": parts, "id": "human-1"},
        {"role": "assistant", "content": None, "id": "ai-1",
         "tool_calls": [{"id": WEIRD_CALL_ID, "type": "function", "function": {"name": "search", "arguments": '{"q": "<x>"}'}}]},
        {"role": "tool", "tool_call_id": WEIRD_CALL_ID, "content": "found", "id": "tool-1"},
        {"role": "assistant", "content": "broken", "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "search", "arguments": "{not json"}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "failed", "status": "error"},
        {"role": "assistant", "content": parts},
    ]
    assert dicts[2]["content"] is not parts  # a copy: the agent's messages are never changed
    assert from_openai_messages(dicts) == messages


def test_the_session_reads_langchain_messages_through_these_conversions(chat_policy):
    session = sdk.Session(chat_policy, model="gpt-4o")
    history = [SystemMessage(content="Be brief."), HumanMessage(content=TASK, id="human-1")]
    step = session.step(history)
    assert step.status == "ready" and isinstance(step.messages[0], SystemMessage)
    assert any(c["item_id"] == "msg-human-1" for c in step.manifest["candidate_items"])


def fresh_import(monkeypatch, missing: str):
    """ctxeng.sdk.langchain imported anew with `missing` unimportable; both restored after the test."""
    monkeypatch.delitem(sys.modules, "ctxeng.sdk.langchain")
    monkeypatch.delattr(sdk, "langchain")
    monkeypatch.setitem(sys.modules, missing, None)
    return importlib.import_module("ctxeng.sdk.langchain")


def test_without_langchain_core_the_import_names_the_extra(monkeypatch):
    with pytest.raises(ImportError, match=re.escape("pip install '.[frameworks]' in a ctxeng checkout")):
        fresh_import(monkeypatch, "langchain_core.messages")


def test_without_langchain_the_middleware_names_the_extra_and_the_conversions_still_work(monkeypatch):
    module = fresh_import(monkeypatch, "langchain.agents.middleware")
    assert module.to_openai_messages([HumanMessage(content="hi")]) == [{"role": "user", "content": "hi"}]
    with pytest.raises(ImportError, match=re.escape("pip install '.[frameworks]' in a ctxeng checkout")):
        module.ContextMiddleware  # noqa: B018


def test_the_readme_snippet_runs_as_written(scripted_chat_model, langchain_tools):
    text = SNIPPET.read_text().split("# --- README ---\n")[1].split("# --- end README ---")[0]
    model = scripted_chat_model()
    namespace: dict[str, Any] = {"model": model, "tools": langchain_tools, "__name__": "readme_snippet"}
    out = io.StringIO()
    with redirect_stdout(out):
        exec(compile(text, str(SNIPPET), "exec"), namespace)
    session, result = namespace["session"], namespace["result"]
    assert len(model.calls) == len(session.steps) == 3
    for call, step in zip(model.calls, session.steps, strict=True):
        assert sha256_json(payload_seen(call, step.manifest)) == step.manifest["assembly"]["serialized_model_input_hash"]
    assert result["messages"][-1].text == ANSWER
    assert session.steps[-1].assembly_id in out.getvalue()


@pytest.mark.parametrize("run_async", [False, True])
def test_the_models_reported_usage_is_kept_beside_each_steps_estimate(scripted_chat_model, langchain_tools, run_async):
    model = scripted_chat_model()
    reported = [(900 + 10 * i, 100 * i, 7 + i) for i in range(len(model.script))]
    model.script = [m.model_copy(update={"usage_metadata": {"input_tokens": n, "output_tokens": out, "total_tokens": n + out,
                                                              "input_token_details": {"cache_read": cached}}})
                    for m, (n, cached, out) in zip(model.script, reported, strict=True)]
    session = sdk.Session("chat-agent", model="gpt-4o")
    run_agent(model, langchain_tools, session, run_async=run_async)
    assert [(s.usage["input_tokens"], s.usage["cached_tokens"], s.usage["output_tokens"]) for s in session.steps] == reported
    assert all(s.usage["estimated_input_tokens"] == s.manifest["budget"]["payload_tokens"] for s in session.steps)
