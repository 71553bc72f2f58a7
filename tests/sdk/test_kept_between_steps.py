"""A caller may change its history in place between steps (issue 48): a call's arguments, a message
in the middle. What the session's engine kept from the step before (the candidate records, the
secret findings of a call's arguments) must then answer for the history as it is now: each step's
manifest and payload are a fresh engine's for the same request (every memo empty: `memo.off()`)."""

from __future__ import annotations

import json

from ctxeng import sdk, starters
from ctxeng.engine import assemble, memo, parse_request

from .test_incremental_step import READ_FILE, without_seal_facts

KEY = "ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2


def history() -> list[dict]:
    messages: list[dict] = [{"role": "system", "content": "You are a coding agent."},
                            {"role": "user", "content": "Find why the retry loop drops the last error."}]
    for n in range(3):
        messages += [
            {"role": "assistant", "content": f"Reading module {n}.", "tool_calls": [
                {"id": f"call_{n}", "type": "function", "function": {"name": "read_file", "arguments": {"path": f"src/m{n}.py"}}}]},
            {"role": "tool", "tool_call_id": f"call_{n}", "content": f"def retry_{n}(attempt):\n    return attempt\n"},
        ]
    return messages


def step_as_fresh(session: sdk.Session, messages: list[dict], policy: str = "coding-agent"):
    request, _ = session.request(messages, tools=[READ_FILE])
    step = session.step(messages, tools=[READ_FILE])
    with memo.off():
        fresh = assemble(parse_request(json.loads(json.dumps(request))), starters.load(policy))
    assert step.status == fresh.status
    assert step.payload == fresh.serialized_input
    assert without_seal_facts(step.manifest) == without_seal_facts(fresh.manifest_dict())
    return step


def test_arguments_changed_in_place_between_steps_are_judged_as_they_are_now():
    # chat-agent redacts a credential in a call's arguments (coding-agent blocks the step).
    messages = history()
    session = sdk.Session("chat-agent", model="gpt-4o", run_id="run-in-place")
    arguments = messages[4]["tool_calls"][0]["function"]["arguments"]
    assert "redacted" not in json.dumps(step_as_fresh(session, messages, "chat-agent").payload)
    arguments["token"] = KEY  # the same dict, changed in place
    step = step_as_fresh(session, messages, "chat-agent")
    assert step.ready and KEY not in json.dumps(step.payload) and "redacted" in json.dumps(step.payload)
    arguments["token"] = 1  # the same key, no credential
    step = step_as_fresh(session, messages, "chat-agent")
    assert step.ready and "redacted" not in json.dumps(step.payload)
    del arguments["token"]
    assert step_as_fresh(session, messages, "chat-agent").ready


def test_a_message_changed_in_place_in_the_middle_of_the_history_is_read_as_it_is_now():
    messages = history()
    session = sdk.Session("coding-agent", model="gpt-4o", run_id="run-middle")
    step_as_fresh(session, messages[:6])
    messages[3]["content"] = "def retry_0(attempt):\n    return attempt + 1\n"  # an earlier result, changed in place
    step = step_as_fresh(session, messages)
    assert step.ready and "attempt + 1" in json.dumps(step.payload)
    messages[2]["content"] = "Reading module 0 again."
    step_as_fresh(session, messages)


def test_sessions_under_other_scopes_in_one_process_record_their_own_scope():
    messages = history()
    first = sdk.Session("coding-agent", model="gpt-4o", run_id="run-a")
    second = sdk.Session("coding-agent", model="gpt-4o", run_id="run-b")
    for end in (4, 6, 8):
        for session in (first, second, first):
            step = step_as_fresh(session, messages[:end])
            assert step.ready
            assert {r["scope"] for r in step.manifest["candidate_items"]} == {session.scope}
