"""The model sees a tool result's status and evidence use (seed §4: partial/error are diagnostic)."""

from __future__ import annotations

import pytest

from .builders import item, policy, request, run, tool_call, tool_result
from .payloads import fence_headers, validate


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


def result_headers(payload: dict) -> dict[str, dict]:
    """call id -> the fence header of the result its tool message (or tool_result block) carries."""
    out = {}
    for m in payload["messages"]:
        if m["role"] == "tool":
            out[m["tool_call_id"]] = fence_headers(m["content"])[0]
        for b in m["content"] if isinstance(m["content"], list) else []:
            if b.get("type") == "tool_result":
                out[b["tool_use_id"]] = fence_headers(b["content"])[0]
    return out


@pytest.mark.parametrize("adapter", ["openai_chat", "anthropic_messages"])
def test_every_result_fence_says_a_status_and_use_that_are_not_plain(adapter):
    r = run(mixed(adapter))
    h = result_headers(r.serialized_input)
    assert (h["c-ok"]["status"], h["c-ok"]["use"]) == ("success", None)
    assert (h["c-part"]["status"], h["c-part"]["use"]) == ("partial", "diagnostic_only")
    assert (h["c-err"]["status"], h["c-err"]["use"]) == ("error", "diagnostic_only")
    context = [f for m in r.serialized_input["messages"] if m["role"] == "user" and isinstance(m["content"], list)
               for p in m["content"] if p.get("type") == "text" for f in fence_headers(p["text"])]
    ev = next(f for f in context if f["cite"] == "ev")
    assert (ev["status"], ev["use"]) == ("success", None)  # not a tool result: no status word


def test_openai_tool_messages_open_with_a_header_naming_anything_but_success():
    r = run(mixed("openai_chat"))
    validate(r.serialized_input, "openai_chat")
    tool = {m["tool_call_id"]: m["content"] for m in r.serialized_input["messages"] if m["role"] == "tool"}
    assert tool["c-part"].startswith("<<<ctx untrusted pi@c0ffee:src/r-part.ts#L1-20 status=partial diagnostic_only>>>\n")
    assert tool["c-err"].startswith("<<<ctx untrusted pi@c0ffee:src/r-err.ts#L1-20 status=error diagnostic_only>>>\n")
    assert tool["c-ok"].startswith("<<<ctx untrusted pi@c0ffee:src/r-ok.ts#L1-20>>>\n")


def test_anthropic_marks_errors_and_says_partial_and_diagnostic_only():
    r = run(mixed("anthropic_messages"))
    validate(r.serialized_input, "anthropic_messages")
    results = {b["tool_use_id"]: b for m in r.serialized_input["messages"] if m["role"] == "user" for b in m["content"] if b.get("type") == "tool_result"}
    assert results["c-err"]["is_error"] is True
    assert results["c-part"]["is_error"] is False and results["c-ok"]["is_error"] is False
    assert "status=partial" in results["c-part"]["content"].splitlines()[0] and "diagnostic_only" in results["c-part"]["content"].splitlines()[0]
    assert "status=" not in results["c-ok"]["content"].splitlines()[0]


def test_a_partial_result_the_policy_admits_as_evidence_still_says_it_is_partial():
    pol = policy()
    pol["structure"] = {"evidence_use_allowed_for": ["success", "partial"]}
    r = run(mixed("openai_chat"), pol)
    tool = {m["tool_call_id"]: m["content"] for m in r.serialized_input["messages"] if m["role"] == "tool"}
    assert tool["c-part"].splitlines()[0].endswith(" status=partial>>>")  # partial, though admitted as evidence


def test_the_fence_header_tokens_are_counted_with_the_status_the_model_sees():
    r = run(mixed("openai_chat"))
    from ctxeng.engine.tokens import default_tokenizer

    tok = default_tokenizer()
    tool = {m["tool_call_id"]: m["content"] for m in r.serialized_input["messages"] if m["role"] == "tool"}
    rec = next(i for i in r.manifest.included if i.item_id == "r-ok")
    # The block as delivered (fence header with status, body, footer) is what the budget counted.
    assert abs(rec.tokens - tok.count(tool["c-ok"])) <= 12
