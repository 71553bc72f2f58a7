"""The policy owns a tool's output trust (seed `trust.default_by_source`, issue 38 point 4).

A session names a tool's results' source type (`tool_sources`); the policy says what that source
type is worth. A policy mapping it to `runtime_state -> trusted_state` admits the result as state,
in its call's place; without such a mapping a tool's output stays fenced untrusted data.
"""

from __future__ import annotations

import json

from ctxeng import sdk, starters
from ctxeng.engine.render import split_fences

STATE_TEXT = "stage: review; approvals: 0"

HISTORY = [
    {"role": "system", "content": "You are an agent."},
    {"role": "user", "content": "What stage are we in?"},
    {"role": "assistant", "content": None,
     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_state", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": STATE_TEXT},
]


def _result_record(step):
    return next(i for i in step.manifest["included"] + step.manifest["excluded"] if i.get("call_id") == "c1")


def _header(text: str) -> dict:
    """The parsed header of the one fenced block a tool message carries (its trust word: `state`
    for trusted state, `untrusted` for data)."""
    (segment,) = split_fences(text)
    assert segment[1] is not None, text
    return segment[1]


def _tool_message(step):
    return next(m for m in step.kwargs["messages"] if m["role"] == "tool")


def test_a_policy_mapping_a_tools_output_to_trusted_state_admits_it_as_state():
    # The starter's own table: runtime_state -> trusted_state, trusted_state -> [state].
    policy = starters.load("chat-agent")
    assert policy.trust.default_by_source["runtime_state"].value == "trusted_state"
    step = sdk.Session("chat-agent", tool_sources={"get_state": "runtime_state"}).step(HISTORY)
    rec = _result_record(step)
    assert rec in step.manifest["included"], rec.get("detail")
    assert (rec["trust"], rec["intended_role"], rec["zone"]) == ("trusted_state", "state", "state")
    pair = step.manifest["tool_pairs"][0]
    assert pair["decision"] == "included"
    # In its call's place, with its own text, labelled state by the header the model reads.
    message = _tool_message(step)
    assert message["tool_call_id"] == "c1" and STATE_TEXT in message["content"]
    header = _header(message["content"])
    assert header["trust"] == "state"


def test_without_a_mapping_a_tools_output_stays_untrusted_data():
    step = sdk.Session("chat-agent").step(HISTORY)
    rec = _result_record(step)
    assert rec in step.manifest["included"]
    assert (rec["source_type"], rec["trust"], rec["zone"]) == ("tool_output", "external_evidence", "untrusted_data")
    assert _header(_tool_message(step)["content"])["trust"] == "untrusted"


def test_a_policy_without_a_default_for_the_source_type_keeps_the_result_data():
    body = json.loads(starters.load("chat-agent").model_dump_json(by_alias=True, exclude_none=True))
    del body["trust"]["default_by_source"]["runtime_state"]
    del body["trust"]["producers"]["runtime_state"]
    step = sdk.Session(body, tool_sources={"get_state": "runtime_state"}).step(HISTORY)
    rec = _result_record(step)
    # No default: nothing vouches for the source type, so it is not state; with no trust label at
    # all it cannot enter, whatever the tool's name says: the policy decides.
    assert rec["intended_role"] == "untrusted_data"
    assert rec in step.manifest["excluded"] and rec["reason"] == "hard_gate_rejected"
    assert "no default for source type 'runtime_state'" in rec["detail"]


def test_a_tool_result_claiming_the_users_role_is_still_refused_at_the_gate():
    session = sdk.Session("chat-agent")
    request, _ = session.request(HISTORY)
    result = next(c for c in request["candidates"] if c.get("call_id") == "c1")
    result.update(source_type="user_request", intended_role="task_intent", source_ref={"object_id": "x", "call_id": "c1"})
    from ctxeng.engine import assemble, parse_request

    manifest = assemble(parse_request(request), session.policy).manifest_dict()
    rec = next(i for i in manifest["excluded"] if i.get("call_id") == "c1")
    assert (rec["reason"], rec["hard_gate"]) == ("hard_gate_rejected", "trust_role_compatibility")
    assert "cannot take role 'task_intent'" in rec["detail"]
