"""Rules of the SDK that the fresh mutation samples found untested (docs/mutation.md, seeds
795277 and 724388). Each expectation is written from the documented rule, not read back from
the code: a default id names its builder, a message conversion keeps order and roles, a call id
the session did not rewrite is the caller's own, and an error names what raised it."""

from __future__ import annotations

import hashlib

import pytest

from ctxeng import sdk
from ctxeng.sdk import _messages
from ctxeng.sdk._session import Step


def test_a_web_pages_default_id_names_the_builder_and_is_a_digest_of_its_url():
    page = sdk.web("https://example.com/a?b=1", "text", fetched_at="2026-01-01T00:00:00Z")
    expected = "web-" + hashlib.sha256(b"https://example.com/a?b=1").hexdigest()[:16]
    assert page.item_id == expected
    # The same URL fetched again is the same item (supersession works on it); another URL is not.
    assert sdk.web("https://example.com/a?b=1", "newer text", fetched_at="2026-01-02T00:00:00Z").item_id == expected
    assert sdk.web("https://example.com/other", "text").item_id != expected


def test_openai_to_anthropic_joins_same_role_neighbours_into_the_last_message_not_another():
    messages = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "an answer"},
        {"role": "user", "content": "a correction"},
        {"role": "user", "content": "and one more thing"},
    ]
    system, out = _messages.openai_to_anthropic(messages)
    assert system == "rules"
    assert out == [
        {"role": "user", "content": [{"type": "text", "text": "first question"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "an answer"}]},
        {"role": "user", "content": [{"type": "text", "text": "a correction"}, {"type": "text", "text": "and one more thing"}]},
    ]


def test_openai_to_anthropic_puts_a_tool_result_after_a_user_turn_in_that_user_message():
    messages = [
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "found"},
        {"role": "user", "content": "thanks"},
    ]
    _, out = _messages.openai_to_anthropic(messages)
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    assert out[1]["content"] == [{"type": "tool_use", "id": "c1", "name": "lookup", "input": {"q": "x"}}]
    assert out[2]["content"] == [{"type": "tool_result", "tool_use_id": "c1", "content": "found"},
                                 {"type": "text", "text": "thanks"}]


def test_restore_call_ids_keeps_the_ids_the_session_did_not_rewrite_in_every_format():
    manifest = {"tool_pairs": [{"serialized_call_id": "ser_1", "call_id": "mine_1"}]}
    anthropic = {"messages": [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "ser_1", "name": "t", "input": {}},
                                          {"type": "tool_use", "id": "toolu_kept", "name": "t", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "ser_1", "content": "a"},
                                     {"type": "tool_result", "tool_use_id": "toolu_kept", "content": "b"}]},
    ]}
    restored = _messages.restore_call_ids(anthropic, manifest)
    assert [b["id"] for b in restored["messages"][0]["content"]] == ["mine_1", "toolu_kept"]
    assert [b["tool_use_id"] for b in restored["messages"][1]["content"]] == ["mine_1", "toolu_kept"]
    assert anthropic["messages"][0]["content"][0]["id"] == "ser_1"  # a copy: the payload is untouched

    chat = {"messages": [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "ser_1", "type": "function", "function": {"name": "t", "arguments": "{}"}},
            {"id": "call_kept", "type": "function", "function": {"name": "t", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "ser_1", "content": "a"},
        {"role": "tool", "tool_call_id": "call_kept", "content": "b"},
    ]}
    restored = _messages.restore_call_ids(chat, manifest)
    assert [c["id"] for c in restored["messages"][0]["tool_calls"]] == ["mine_1", "call_kept"]
    assert [m["tool_call_id"] for m in restored["messages"][1:]] == ["mine_1", "call_kept"]

    responses = {"input": [
        {"type": "function_call", "call_id": "ser_1", "name": "t", "arguments": "{}"},
        {"type": "function_call", "call_id": "fc_kept", "name": "t", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "ser_1", "output": "a"},
        {"type": "function_call_output", "call_id": "fc_kept", "output": "b"},
    ]}
    restored = _messages.restore_call_ids(responses, manifest)
    assert [i["call_id"] for i in restored["input"]] == ["mine_1", "fc_kept", "mine_1", "fc_kept"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: sdk.writes(""), "writes(argument=...): expected the name of the tool's argument, got ''"),
        (lambda: sdk.writes("path", about="  "), "writes(about=...): expected the name of the tool's argument, got '  '"),
        (lambda: sdk.writes("path", scope="tenant/x"), "writes(scope=...): expected a function"),
        (lambda: sdk.reads(None), "reads(argument=...): expected the name of the tool's argument, got None"),
        (lambda: sdk.about(3), "about(argument=...): expected the name of the tool's argument, got 3"),
    ],
)
def test_a_tool_declarations_refusal_names_the_builder_and_the_argument(call, message):
    with pytest.raises(sdk.SDKError) as refused:
        call()
    assert str(refused.value).startswith(message)


def _blocked_step(detail: list[str]) -> Step:
    manifest = {"assembly": {"id": "asm-7", "status": "blocked", "blocked_reason": "required_item_missing",
                             "blocked_detail": detail}}
    return Step(manifest=manifest, payload=None, fmt="openai_chat")


def test_a_blocked_steps_error_names_the_assembly_and_reason_and_adds_the_detail_only_when_there_is_one():
    with pytest.raises(sdk.ContextBlocked) as bare:
        _blocked_step([]).raise_for_status()
    assert str(bare.value) == "assembly asm-7 is blocked: required_item_missing"
    with pytest.raises(sdk.ContextBlocked) as detailed:
        _blocked_step(["task missing", "policy requires it"]).raise_for_status()
    assert str(detailed.value) == "assembly asm-7 is blocked: required_item_missing (task missing; policy requires it)"
    assert detailed.value.reason == "required_item_missing"


def test_a_policy_the_engine_refuses_is_one_sdk_error_listing_each_problem_apart():
    from ctxeng.engine import parse_policy
    from ctxeng.engine.errors import InvalidInput

    body = {"policy_schema_version": "context-policy/v1", "policy": {"id": "p"}}  # no revision, no sections
    with pytest.raises(InvalidInput) as engine:
        parse_policy(body)
    assert len(engine.value.errors) >= 2
    with pytest.raises(sdk.SDKError) as refused:
        sdk.Session(body, model={"name": "gpt-4o", "provider": "openai", "context_limit": 8000})
    assert str(refused.value) == "policy: " + "; ".join(engine.value.errors)


def test_an_extra_items_observed_at_defaults_to_when_the_session_first_saw_that_item():
    session = sdk.Session("chat-agent", model={"name": "gpt-4o", "provider": "openai", "context_limit": 8000})
    first = session._extra_item({"item_id": "a", "content": "x"}, 0, "2026-01-01T00:00:00Z")
    other = session._extra_item({"item_id": "b", "content": "y"}, 0, "2026-01-01T00:05:00Z")
    again = session._extra_item({"item_id": "a", "content": "x"}, 0, "2026-01-01T00:09:00Z")
    assert first["observed_at"] == "2026-01-01T00:00:00Z"
    assert other["observed_at"] == "2026-01-01T00:05:00Z"  # another item: its own first sight
    assert again["observed_at"] == "2026-01-01T00:00:00Z"  # the same item: still when first seen
    given = session._extra_item({"item_id": "c", "content": "z", "observed_at": "2025-12-31T00:00:00Z"}, 0, "2026-01-01T00:10:00Z")
    assert given["observed_at"] == "2025-12-31T00:00:00Z"  # the caller's own time is kept


def test_a_ref_by_path_and_revision_is_written_path_at_revision():
    from ctxeng.engine.render import compact_ref

    assert compact_ref({"path": "docs/plan.md", "revision": 3}) == "docs/plan.md@3"
    assert compact_ref({"path": "docs/plan.md", "revision": 3}, 3) == "docs/plan.md@3"  # stated once
    assert compact_ref({"artifact_id": "plan-42", "revision": 5}) == "plan-42@5"


def test_the_langchain_reply_size_is_read_from_settings_then_the_chat_model_and_else_none():
    from types import SimpleNamespace

    from ctxeng.sdk.langchain import reply_params

    assert reply_params(SimpleNamespace(model_settings={"max_tokens": 300}, model=SimpleNamespace(max_tokens=900))) == {"max_tokens": 300}
    assert reply_params(SimpleNamespace(model_settings={}, model=SimpleNamespace(max_tokens=900))) == {"max_tokens": 900}
    # A request object with neither settings nor a model (what a custom middleware may pass): no size.
    assert reply_params(SimpleNamespace()) == {}
    assert reply_params(SimpleNamespace(model_settings=None, model=SimpleNamespace(max_tokens=True))) == {}


@pytest.mark.parametrize("marker", [
    {"role": "system", "content": "Be brief."},
    {"role": "developer", "content": "Be brief."},
    {"role": "tool", "tool_call_id": "c1", "content": "18C"},
    {"role": "assistant", "content": None, "tool_calls": []},
])
def test_a_history_with_an_openai_only_message_reads_as_openai_even_beside_a_system_argument(marker):
    # Written for a survivor of seed 349366 (docs/mutation.md): Anthropic's messages have no
    # system, developer or tool role and no tool_calls, so one such message decides the format;
    # `system=` decides only a history that could be either.
    from ctxeng.sdk._messages import detect_format

    history = [marker, {"role": "user", "content": "Paris?"}]
    assert detect_format(history, system="You answer questions.") == "openai"
    assert detect_format([{"role": "user", "content": "Paris?"}], system="You answer questions.") == "anthropic"
    assert detect_format([{"role": "user", "content": "Paris?"}]) == "openai"
