"""The model sees a tool result's status and evidence use (seed §4: partial/error are diagnostic)."""

from __future__ import annotations

import json

import pytest

from tests.golden import _BLOCK

from .builders import item, policy, request, run, tool_call, tool_result
from .payloads import validate

STATUS_LINE = "[ctxeng: tool result status: {status}; evidence_use: {use}]"


def mixed(adapter: str, **fields) -> dict:
    return request(
        extra=[
            item("ev", content="evidence text"),
            tool_result("r-ok", "c-ok", "all good"),
            tool_result("r-part", "c-part", "half of the output"),
            tool_result("r-err", "c-err", "Traceback: boom"),
        ],
        tool_calls=[
            tool_call("c-ok", "r-ok"),
            tool_call("c-part", "r-part", status="partial"),
            tool_call("c-err", "r-err", status="error"),
        ],
        adapter=adapter,
        **fields,
    )


def headers(payload: dict) -> dict[str, dict]:
    """item_id -> the identity in its fence header, wherever in the payload the block was delivered."""
    return {
        json.loads(m.group("identity"))["item_id"]: json.loads(m.group("identity"))
        for text in _strings(payload)
        for m in _BLOCK.finditer(text)
    }


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@pytest.mark.parametrize("adapter", ["openai_chat", "anthropic_messages"])
def test_every_fence_header_carries_status_and_evidence_use(adapter):
    r = run(mixed(adapter))
    h = headers(r.serialized_input)
    assert (h["r-ok"]["status"], h["r-ok"]["evidence_use"]) == ("success", "confirmed_by_policy")
    assert (h["r-part"]["status"], h["r-part"]["evidence_use"]) == ("partial", "diagnostic_only")
    assert (h["r-err"]["status"], h["r-err"]["evidence_use"]) == ("error", "diagnostic_only")
    assert "status" in h["ev"] and h["ev"]["status"] is None and h["ev"]["evidence_use"] is None


def test_openai_tool_messages_start_with_a_status_line_for_anything_but_success():
    r = run(mixed("openai_chat"))
    validate(r.serialized_input, "openai_chat")
    tool = {m["tool_call_id"]: m["content"] for m in r.serialized_input["messages"] if m["role"] == "tool"}
    assert tool["c-part"].startswith(STATUS_LINE.format(status="partial", use="diagnostic_only") + "\n")
    assert tool["c-err"].startswith(STATUS_LINE.format(status="error", use="diagnostic_only") + "\n")
    assert tool["c-ok"].startswith("<<<ctxeng:block ")


def test_anthropic_marks_errors_and_says_partial_and_diagnostic_only():
    r = run(mixed("anthropic_messages"))
    validate(r.serialized_input, "anthropic_messages")
    results = {b["tool_use_id"]: b for m in r.serialized_input["messages"] if m["role"] == "user" for b in m["content"] if b.get("type") == "tool_result"}
    assert results["c-err"]["is_error"] is True
    assert results["c-part"]["is_error"] is False and results["c-ok"]["is_error"] is False
    assert "partial" in results["c-part"]["content"].splitlines()[0] and "diagnostic_only" in results["c-part"]["content"].splitlines()[0]
    assert not results["c-ok"]["content"].startswith("[ctxeng: tool result status")


def test_a_partial_result_the_policy_admits_as_evidence_still_says_it_is_partial():
    pol = policy()
    pol["structure"] = {"evidence_use_allowed_for": ["success", "partial"]}
    r = run(mixed("openai_chat"), pol)
    tool = {m["tool_call_id"]: m["content"] for m in r.serialized_input["messages"] if m["role"] == "tool"}
    assert tool["c-part"].startswith(STATUS_LINE.format(status="partial", use="confirmed_by_policy"))


def test_the_fence_header_tokens_are_counted_with_the_status_the_model_sees():
    r = run(mixed("openai_chat"))
    from ctxeng.engine.tokens import default_tokenizer

    tok = default_tokenizer()
    tool = {m["tool_call_id"]: m["content"] for m in r.serialized_input["messages"] if m["role"] == "tool"}
    rec = next(i for i in r.manifest.included if i.item_id == "r-ok")
    # The block as delivered (fence header with status, body, footer) is what the budget counted.
    assert abs(rec.tokens - tok.count(tool["c-ok"])) <= 12
