"""What a session remembers from step to step (issue 37, point 5: a message seen at an earlier step
is not hashed, validated or counted again) changes no decision: each step's sealed manifest and
payload are those a fresh engine gives for the same request, under a policy parsed anew. The
oracle is that fresh assembly, made without the session (outputs compared, never timings)."""

from __future__ import annotations

import copy
import json

import pytest

from ctxeng import sdk, starters
from ctxeng.engine import assemble, memo, parse_request

READ_FILE = {"type": "function", "function": {"name": "read_file", "description": "Read a file",
             "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}


def coding_history(calls: int) -> list[dict]:
    """A request, then file reads; the third file is read again after an edit of its content."""
    messages: list[dict] = [{"role": "system", "content": "You are a coding agent. Read before you edit."},
                            {"role": "user", "content": "Find why the retry loop drops the last error."}]
    for n in range(calls):
        path = f"src/module_{n % 3}.py"  # files read again: the same path, new content
        messages += [
            {"role": "assistant", "content": f"Reading {path}.", "tool_calls": [
                {"id": f"call_{n}", "type": "function", "function": {"name": "read_file", "arguments": {"path": path}}}]},
            {"role": "tool", "tool_call_id": f"call_{n}", "content": f"def retry_{n}(attempt):\n    return attempt + {n}\n"},
        ]
        if n == 4:
            messages.append({"role": "user", "content": "Also check the backoff."})
    return messages


def without_seal_facts(manifest: dict) -> dict:
    """The manifest without what differs between two seals of one request: the assembly id and time."""
    out = copy.deepcopy(manifest)
    for key in ("id", "created_at"):
        out["assembly"].pop(key, None)
    return out


@pytest.mark.parametrize("adapter", ["openai_chat", "anthropic_messages"])
def test_each_steps_manifest_and_payload_are_a_fresh_engines_for_the_same_request(adapter):
    model = "claude-sonnet-4-5" if adapter == "anthropic_messages" else "gpt-4o"
    session = sdk.Session("coding-agent", model=model, adapter=adapter, run_id="run-incremental",
                          tools={"read_file": sdk.reads("path")})
    full = coding_history(8)
    ends = [end for end in range(2, len(full) + 1) if full[end - 1]["role"] in ("user", "tool")]
    assert len(ends) == 10
    for end in ends:
        request, _ = session.request(full[:end], tools=[READ_FILE], max_tokens=512)
        step = session.step(full[:end], tools=[READ_FILE], max_tokens=512)
        with memo.off():
            fresh = assemble(parse_request(json.loads(json.dumps(request))), starters.load("coding-agent"))
        assert fresh.status == step.status == "ready"
        assert step.payload == fresh.serialized_input
        assert without_seal_facts(step.manifest) == without_seal_facts(fresh.manifest_dict())


def test_a_session_never_changes_the_callers_messages():
    history = coding_history(4)
    before = copy.deepcopy(history)
    session = sdk.Session("coding-agent", model="gpt-4o")
    for end in range(2, len(history) + 1):
        session.step(history[:end], tools=[READ_FILE])
    assert history == before
    request, _ = session.request(history, tools=[READ_FILE])
    (call,) = [c for c in request["tool_calls"] if c["call_id"] == "call_0"]
    call["arguments"]["path"] = "changed"  # the request holds its own copy of dict arguments
    assert history[2]["tool_calls"][0]["function"]["arguments"] == {"path": "src/module_0.py"}


def _tracked_objects(root: object) -> int:
    """The objects the garbage collector walks that `root` holds, directly or not."""
    import gc

    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or not gc.is_tracked(obj):
            continue
        seen.add(id(obj))
        stack.extend(r for r in gc.get_referents(obj) if not isinstance(r, type))
    return len(seen)


def test_a_step_the_session_moved_past_reads_as_it_was_and_holds_few_objects():
    session = sdk.Session("coding-agent", model="gpt-4o", run_id="run-retired")
    history = coding_history(6)
    first = session.step(history[:4], tools=[READ_FILE])
    first.report_usage({"usage": {"prompt_tokens": 300, "completion_tokens": 20}})
    seen = {"payload": copy.deepcopy(first.payload), "manifest": copy.deepcopy(first.manifest),
            "sealed": copy.deepcopy(first.sealed_manifest), "messages": copy.deepcopy(first.messages),
            "status": first.status, "id": first.assembly_id, "usage": dict(first.usage)}
    held = _tracked_objects(first)
    for end in range(5, len(history) + 1):
        session.step(history[:end], tools=[READ_FILE])
    last = session.steps[-1]
    # The steps before the last hold a handful of objects; the last one holds its payload and records.
    assert _tracked_objects(first) < 10 < held
    assert _tracked_objects(last) > held
    assert first.status == seen["status"] == "ready"
    assert first.payload == seen["payload"]
    assert first.manifest == seen["manifest"] and first.manifest["budget"]["actual_input_tokens"] == 300
    assert first.sealed_manifest == seen["sealed"]
    assert first.messages == seen["messages"]
    assert first.kwargs == seen["payload"]
    assert (first.assembly_id, first.usage) == (seen["id"], seen["usage"])


def test_a_step_holding_a_value_pickle_refuses_is_kept_as_it_is():
    session = sdk.Session("coding-agent", model="gpt-4o", run_id="run-unpicklable")
    history = coding_history(2)
    first = session.step(history[:4], tools=[READ_FILE])
    def hook():
        return "the caller's own"
    first.payload = {**first.payload, "hook": hook}  # a caller's value in the step: pickle refuses a local function
    session.step(history[:5], tools=[READ_FILE])
    assert first.payload["hook"] is hook and first.status == "ready"
    assert first.manifest["assembly"]["step_id"] == "step-1"


def test_sessions_sharing_a_process_never_reuse_each_others_outcomes():
    # The memos are per process (issue 48): two sessions over the same history, whose facts differ
    # (policy, scope, model size, reply size: each changes the payload's bytes or a decision),
    # stepped in turn, each step equal to a fresh engine's with every memo empty.
    key = "ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2
    history = coding_history(6)
    history[4]["tool_calls"][0]["function"]["arguments"] = {"path": "src/module_1.py", "token": key}
    history[5]["content"] += f"TOKEN = {key!r}\n"
    strict = starters.load("coding-agent")
    strict = strict.model_copy(update={"security": strict.security.model_copy(update={"secret_material": "deny"})})
    sessions = [
        (sdk.Session("coding-agent", model="gpt-4o", run_id="run-a"), starters.load("coding-agent"), {"max_tokens": 512}),
        (sdk.Session(strict, model={"name": "gpt-4o", "provider": "openai", "context_limit": 8000}, run_id="run-b",
                     scope="local/default/elsewhere"), strict, {"max_tokens": 700}),
    ]
    statuses = set()
    for end in range(3, len(history) + 1):
        if history[end - 1]["role"] not in ("user", "tool"):
            continue
        for session, policy, params in sessions:
            request, _ = session.request(history[:end], tools=[READ_FILE], **params)
            step = session.step(history[:end], tools=[READ_FILE], **params)
            with memo.off():
                fresh = assemble(parse_request(json.loads(json.dumps(request))), policy)
            assert step.status == fresh.status
            assert step.payload == fresh.serialized_input
            assert without_seal_facts(step.manifest) == without_seal_facts(fresh.manifest_dict())
            statuses.add(step.status)
            excluded = {e["item_id"]: e["reason"] for e in step.manifest["excluded"]}
            if policy is strict and end >= 6:  # the result holding the key is denied here, redacted in the other session
                assert "security_rejected" in excluded.values()
    assert "ready" in statuses
